"""A SavedModel's variables, checked before it loads: whole, and its own graph's; else one line naming the file.

TensorFlow's loader reads the variables only after it has built the graph,
and says what is wrong with them in its own terms: an IndexError for a
truncated data file, a checksum error, a 161-line AssertionError for
another model's variables, or nothing at all when their shapes happen to
fit (a tagger's variables in a classifier, each tensor of the same shape,
answer with the wrong weights). `check_variables` reads what the files
declare, without reading a weight, and refuses:

- a `variables.index` that is missing or not an index (truncated, corrupt);
- data files (`variables.data-*`) that are missing, or shorter than the
  tensors the index declares (truncated);
- an index other than the one the SavedModel was saved with: TensorFlow
  records its hash in `fingerprint.pb` (`checkpoint_hash`);
- variables that do not fit the graph: a variable of the graph without a
  value, of another shape or dtype, or values for variables the graph does
  not have (matched as the loader matches them: by their path of names).

`variables_error` turns what the loader still raises (a checksum that does not
match, in the middle of a data file) into the same kind of line.
"""

import glob
import os
import re

import numpy as np
import tensorflow as tf

VARIABLES_FOLDER = "variables"
_PREFIX = "variables"
# The checkpoint key of the object graph that maps checkpoint keys to graph nodes.
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VARIABLE_VALUE = "VARIABLE_VALUE"


def variable_files(path):
    """`(index file, [data files])` of the SavedModel at `path`."""
    prefix = os.path.join(path, VARIABLES_FOLDER, _PREFIX)
    return prefix + ".index", sorted(glob.glob(glob.escape(prefix) + ".data-*"))


def check_variables(path, saved_model=None):
    """Raises a ValueError, in one line naming the file, unless the SavedModel at `path` has whole variables of its own graph.

    Args:
        path: a SavedModel folder (one version).
        saved_model: its parsed `SavedModel` proto, where the caller has it.
    """
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    from tensorflow.python.saved_model import loader_impl

    path = os.fspath(path)
    index, data = variable_files(path)
    if saved_model is None:
        saved_model = loader_impl.parse_saved_model(path)
    graph_variables = _graph_variables(saved_model)
    if not os.path.exists(index):
        if graph_variables:
            raise ValueError(f"{index}: missing; the SavedModel's {len(graph_variables)} variables have no values.")
        return  # a model without variables
    _check_fingerprint(path, index)
    try:
        reader = tf.train.load_checkpoint(index[: -len(".index")])
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    except (tf.errors.OpError, IndexError, ValueError, RuntimeError) as error:
        raise ValueError(f"{index}: truncated or corrupt, or not a variables index ({_reason(error)}).") from None
    data_name = data[0] if len(data) == 1 else os.path.join(os.path.dirname(index), f"{_PREFIX}.data-*")
    if not data:
        raise ValueError(f"{data_name}: missing; {index} names values that are in no data file.")
    declared = sum(int(np.prod(shape)) * dtypes[key].size for key, shape in shapes.items()
                   if dtypes[key] not in (tf.string, tf.variant, tf.resource))
    size = sum(os.path.getsize(file) for file in data)
    if declared > size:
        raise ValueError(f"{data_name}: truncated ({size:,} bytes, where the tensors that {os.path.basename(index)} "
                         f"declares take at least {declared:,}).")
    if _OBJECT_GRAPH_KEY not in shapes:
        return  # a TF1 checkpoint: matched by name, as the loader does, not checked here
    try:
        object_graph = trackable_object_graph_pb2.TrackableObjectGraph()
        object_graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
    except (tf.errors.OpError, IndexError, ValueError, RuntimeError) as error:
        raise ValueError(f"{data_name}: truncated or corrupt ({_reason(error)}).") from None
    mismatch = _mismatch(saved_model, object_graph, shapes, dtypes)
    if mismatch:
        raise ValueError(f"{index}: these variables do not fit the SavedModel's graph ({mismatch}); another "
                         "model's variables?")


def variables_error(path, error):
    """The one-line ValueError for an error `tf.saved_model.load(path)` raised while restoring variables, or None for another error."""
    restoring = isinstance(error, (IndexError, AssertionError, tf.errors.DataLossError)) or (
        isinstance(error, ValueError) and "restore" in str(error))
    if not restoring:
        return None
    index, data = variable_files(path)
    data_name = data[0] if len(data) == 1 else os.path.join(os.path.dirname(index), f"{_PREFIX}.data-*")
    return ValueError(f"{data_name}: truncated or corrupt, or not this model's variables ({_reason(error)}).")


def _graph_variables(saved_model):
    """`{node id: SavedVariable}` of the object graph (the first meta graph's, which the loader reads)."""
    if not saved_model.meta_graphs:
        return {}
    nodes = saved_model.meta_graphs[0].object_graph_def.nodes
    return {number: node.variable for number, node in enumerate(nodes) if node.WhichOneof("kind") == "variable"}


def _check_fingerprint(path, index):
    """Refuses an index other than the one `fingerprint.pb` recorded (where the SavedModel has one)."""
    if not os.path.isfile(os.path.join(path, "fingerprint.pb")):
        return
    try:
        recorded = tf.saved_model.experimental.read_fingerprint(path).checkpoint_hash
        with open(index, "rb") as file:
            contents = file.read()
    except (OSError, ValueError, tf.errors.OpError):
        return  # an unreadable fingerprint: the checks below still run
    if not recorded:
        return  # TensorFlow could not hash the index when it saved
    # TensorFlow's checkpoint hash: the 64-bit farmhash of the index file.
    digest = tf.fingerprint(tf.constant([contents]), method="farmhash64").numpy()[0]
    if int.from_bytes(bytes(digest), "little") != recorded:
        raise ValueError(f"{index}: not the variables this SavedModel was saved with (the hash of the file "
                         "differs from the one its fingerprint.pb recorded); another model's variables?")


def _mismatch(saved_model, object_graph, shapes, dtypes):
    """What does not fit between the graph's variables and the checkpoint's values, in words; or None.

    Values are matched to variables as TensorFlow's loader matches them:
    by the path of names from the root object (and an optimizer's slots by
    their variable and slot name), not by node number.
    """
    saved = saved_model.meta_graphs[0].object_graph_def.nodes if saved_model.meta_graphs else []
    stored = object_graph.nodes
    if not saved or not stored:
        return None
    pairs, waiting = {0: 0}, [(0, 0)]
    while waiting:
        ours, theirs = waiting.pop()
        children = {child.local_name: child.node_id for child in stored[theirs].children}
        found = [(child.node_id, children[child.local_name]) for child in saved[ours].children
                 if child.local_name in children]
        slots = {(slot.original_variable_node_id, slot.slot_name): slot.slot_variable_node_id
                 for slot in stored[theirs].slot_variables}
        found += [(slot.slot_variable_node_id, slots[pairs[slot.original_variable_node_id], slot.slot_name])
                  for slot in saved[ours].slot_variables
                  if slot.original_variable_node_id in pairs
                  and (pairs[slot.original_variable_node_id], slot.slot_name) in slots]
        for pair in found:
            if pair[0] not in pairs and pair[1] < len(stored):
                pairs[pair[0]] = pair[1]
                waiting.append(pair)
    for number, node in enumerate(saved):
        if node.WhichOneof("kind") != "variable":
            continue
        variable = node.variable
        name = variable.name or f"variable {number}"
        keys = [attribute.checkpoint_key for attribute in stored[pairs[number]].attributes
                if attribute.name == _VARIABLE_VALUE] if number in pairs else []
        if not keys or keys[0] not in shapes:
            return f"the graph's {name} has no value in the file"
        wanted = None if variable.shape.unknown_rank else [dim.size for dim in variable.shape.dim]
        found = shapes[keys[0]]
        if wanted is not None and (len(wanted) != len(found)
                                   or any(w >= 0 and w != f for w, f in zip(wanted, found))):
            return f"the graph's {name} is {wanted}, the file's {found}"
        if dtypes[keys[0]].as_datatype_enum != variable.dtype:
            return (f"the graph's {name} is {tf.dtypes.as_dtype(variable.dtype).name}, the file's "
                    f"{dtypes[keys[0]].name}")
    matched = set(pairs.values())
    extra = [number for number, node in enumerate(stored) if number not in matched
             and any(attribute.name == _VARIABLE_VALUE for attribute in node.attributes)]
    if extra:
        return f"the file holds {len(extra)} values for variables the graph does not have"
    return None


def _reason(error):
    """TensorFlow's message in one short line: no function-node prefix, no `[Op:...]`, no traceback."""
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    message = re.sub(r"\{\{[^}]*\}\}\s*", "", message)
    message = re.sub(r"\s*\[Op:\w+\]", "", message)
    line = " ".join(message.strip().splitlines()[:1]).rstrip(".")
    return line[:300] + ("..." if len(line) > 300 else "")
