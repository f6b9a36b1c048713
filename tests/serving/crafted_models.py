"""SavedModels edited as an attacker would, to dodge kbert's op check, and models that run without end."""

import os
import shutil

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2


def read_saved_model(folder):
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(folder, "saved_model.pb"), "rb") as file:
        saved_model.ParseFromString(file.read())
    return saved_model


def write_saved_model(folder, saved_model):
    with open(os.path.join(folder, "saved_model.pb"), "wb") as file:
        file.write(saved_model.SerializeToString())


def _functions(meta_graph):
    return {function.signature.name: function for function in meta_graph.graph_def.library.function}


def _graph_node(meta_graph, tensor_name):
    name = tensor_name.split(":")[0]
    return next(node for node in meta_graph.graph_def.node if node.name == name)


class _Writer(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer, which loading runs, writes a checkpoint to `target`."""

    def __init__(self, target):
        self.target = str(target)
        super().__init__()

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="")

    def _initialize(self):
        tf.raw_ops.SaveV2(prefix=self.target, tensor_names=["w"], shape_and_slices=[""],
                          tensors=[tf.constant(1.0)])


def initializer_hidden_in_the_save_function(folder, written):
    """A SavedModel whose resource initializer writes `written.*` and looks as if only the saver calls it.

    The initializer is taken out of the object graph's `concrete_functions`
    and out of the graph's init nodes, is called from the saver's save
    function, and stays a bare function of the resource, which
    `tf.saved_model.load` runs: a check that counts only the keys of
    `concrete_functions` as what loading runs takes it for saver code.
    """

    class Model(tf.Module):
        def __init__(self):
            self.writer = _Writer(written)
            self.weight = tf.Variable(1.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            return {"labels": text}

    model = Model()
    tf.saved_model.save(model, str(folder), signatures={"serving_default": model.serve})
    saved_model = read_saved_model(folder)
    meta_graph = saved_model.meta_graphs[0]
    functions = _functions(meta_graph)
    initializer = next(name for name in functions if "_initializer" in name)
    del meta_graph.object_graph_def.concrete_functions[initializer]
    for node in meta_graph.object_graph_def.nodes:  # bare functions load without their saved signature
        kind = node.WhichOneof("kind")
        if (kind == "function" and initializer in node.function.concrete_functions) or (
                kind == "bare_concrete_function" and node.bare_concrete_function.concrete_function_name == initializer):
            node.bare_concrete_function.Clear()
            node.bare_concrete_function.concrete_function_name = initializer
    # Called without outputs, as a bare function is; the write kept by a control output.
    body = functions[initializer]
    body.signature.ClearField("output_arg")
    body.ret.clear()
    body.signature.control_output.append("write")
    body.control_ret["write"] = "SaveV2"
    # Out of the graph's init nodes...
    callers = {node.name for node in meta_graph.graph_def.node if node.attr["f"].func.name == initializer}
    kept = [node for node in meta_graph.graph_def.node if node.name not in callers]
    for node in kept:
        node.input[:] = [name for name in node.input if name.lstrip("^").split(":")[0] not in callers]
    del meta_graph.graph_def.node[:]
    meta_graph.graph_def.node.extend(kept)
    # ...and into the save function.
    save = functions[_graph_node(meta_graph, meta_graph.saver_def.save_tensor_name).attr["f"].func.name]
    call = save.node_def.add(name="also_initialize", op="StatefulPartitionedCall")
    call.attr["f"].func.name = initializer
    call.attr["Tin"].list.SetInParent()
    call.attr["Tout"].list.SetInParent()
    write_saved_model(folder, saved_model)
    return str(folder)


def restore_from_a_path_in_the_model(export, folder, prefix):
    """A copy of `export` whose restore function reads the checkpoint at `prefix`, not the one its loader names."""
    shutil.copytree(export, folder)
    saved_model = read_saved_model(folder)
    meta_graph = saved_model.meta_graphs[0]
    restore = _functions(meta_graph)[_graph_node(meta_graph, meta_graph.saver_def.restore_op_name)
                                     .attr["f"].func.name]
    constant = restore.node_def.add(name="elsewhere", op="Const")
    constant.attr["dtype"].type = tf.string.as_datatype_enum
    constant.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(str(prefix)))
    for node in restore.node_def:
        if node.op == "RestoreV2":
            node.input[0] = "elsewhere:output:0"
    write_saved_model(folder, saved_model)
    return str(folder)


def save_node_read_by_a_signature(export, folder):
    """A copy of `export` whose `serving_default` also returns what the saver's save node returns."""
    shutil.copytree(export, folder)
    saved_model = read_saved_model(folder)
    meta_graph = saved_model.meta_graphs[0]
    output = meta_graph.signature_def["serving_default"].outputs["saved_to"]
    output.name = meta_graph.saver_def.save_tensor_name
    output.dtype = tf.string.as_datatype_enum
    write_saved_model(folder, saved_model)
    return str(folder)


def endless_model(folder, kind):
    """A SavedModel of safe ops whose `serving_default` never ends ("loop") or grows to 4 GiB ("memory")."""

    class Endless(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            if kind == "loop":
                count = tf.while_loop(lambda i: tf.size(text) >= 0, lambda i: i + 1, [tf.constant(0)])
            else:
                count = tf.cast(tf.reduce_sum(tf.fill([2**30 + tf.size(text)], 1.0)), tf.int32)
            return {"labels": tf.strings.as_string(count) + text}

    module = Endless()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    return str(folder)


def queue_model(folder):
    """A SavedModel whose `serving_default` waits on a queue that nothing fills."""

    class Waiting(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.string])
            [waited] = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.string])
            return {"labels": waited + text}

    module = Waiting()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    return str(folder)
