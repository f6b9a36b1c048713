"""Refuses a SavedModel whose graph can reach files, the network or other processes, before it is loaded."""

import os
from pathlib import Path

from kbert.io.setting_error import SettingError

SAFE_OPS = Path(__file__).with_name("safe_ops.txt")
# Every TF2 SavedModel holds a save function and a restore function, which
# its meta graph's `saver_def` names through two graph nodes. Loading never
# saves: `tf.saved_model.load` restores variables with ops of its own, and
# a model server runs only the restore function, on the model's own
# `variables/`. So the save function's checkpoint ops are allowed only in
# code that nothing loading or serving runs can reach, and `RestoreV2` only
# in the restore function itself, reading the file its caller names.
SAVE_ONLY_OPS = frozenset({"SaveV2", "MergeV2Checkpoints", "ShardedFilename"})
RESTORE_ONLY_OPS = frozenset({"RestoreV2"})
# The ops that call the saver functions in a TF2 SavedModel's graph.
_CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def check_safe_to_load(path):
    """Raises unless every op that loading or calling the SavedModel at `path` can run is safe; returns its ops.

    A SavedModel is a program: loading it runs its initializers, and
    calling it runs its graph, with the user's rights. kbert runs one only
    when its graph and every function of its library use nothing but the
    ops of `safe_ops.txt`, which compute in memory and never read or write
    files, reach the network, run Python, wait on other work or end the
    process (`make_safe_ops.py` says how the list is made).

    What is checked as code that runs: every node of the graph, every
    function that the object graph names anywhere (signatures, methods,
    resource initializers, saveable objects, captures), and everything
    they call. The only exceptions are the saver's two functions, and only
    while their graph nodes are inert (fed by the saver's filename
    placeholder, read by no other node, signature or collection): the save
    function, which nothing that loads runs, may use `SaveV2`,
    `MergeV2Checkpoints` and `ShardedFilename`; the restore function may
    use `RestoreV2` on its own first argument, the file a loader names.

    The graph is read as TensorFlow's loader reads it, without running it.

    Raises:
        ValueError: naming the SavedModel and the ops that are not safe.
    """
    from tensorflow.python.saved_model import loader_impl

    path = os.fspath(path)
    # The loader's own parser: the same file (saved_model.pb, .pbtxt or a
    # chunked .cpb) that loading would read.
    saved_model = loader_impl.parse_saved_model(path)
    ops, unsafe = _ops(saved_model, _safe_ops())
    if unsafe:
        raise SettingError(
            f"Refused to load the SavedModel at {path}: a SavedModel is a program, and this one uses ops "
            f"that can reach files, the network or other processes, wait without end, or that kbert does "
            f"not know as safe: {sorted(unsafe)}; pass `trust` only for a model whose source you "
            "trust.", ["trust"]
        )
    return ops


def _safe_ops():
    lines = SAFE_OPS.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def _ops(saved_model, safe):
    """`(every op type, the ones not allowed where they are)` over all meta graphs."""
    ops, unsafe = set(), set()
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        functions = {function.signature.name: function for function in graph.library.function}
        gradients = {gradient.function_name: gradient.gradient_func for gradient in graph.library.gradient}
        save_node, restore_node = _inert_saver_nodes(meta_graph)
        # What loading or serving may run: every other graph node, and every
        # function the object graph names, in whatever field.
        running_roots = _strings(meta_graph.object_graph_def) & set(functions)
        for node in graph.node:
            ops.add(node.op)
            if node.op not in functions and node.op not in safe:
                unsafe.add(node.op)
            if node.name not in (save_node, restore_node):
                running_roots |= _callees(node, functions)
        running = _reachable(running_roots, functions, gradients)
        allowed_extra = {}
        if restore_node:
            restore_roots = _callees(_node(graph, restore_node), functions) - running
            for name in restore_roots:
                allowed_extra[name] = RESTORE_ONLY_OPS
            running |= _reachable(restore_roots, functions, gradients) - restore_roots
        if save_node:
            for name in _reachable(_callees(_node(graph, save_node), functions), functions, gradients) - running:
                allowed_extra[name] = SAVE_ONLY_OPS if name not in allowed_extra else frozenset()
        for name, function in functions.items():
            allowed = safe | allowed_extra.get(name, frozenset())
            arguments = {argument.name for argument in function.signature.input_arg[:1]}
            for node in function.node_def:
                if node.op in functions:
                    continue  # a call of a library function, checked as a function
                ops.add(node.op)
                if node.op not in allowed:
                    unsafe.add(node.op)
                elif node.op in RESTORE_ONLY_OPS and _node_name(node.input[0]) not in arguments:
                    unsafe.add(node.op)  # restores from a path written in the model, not the loader's
    return ops, unsafe


def _inert_saver_nodes(meta_graph):
    """`(save node, restore node)` names, each None unless nothing but a loader can run it.

    A saver node is inert when it is a function call whose first input is
    the saver's filename placeholder, and no other node, signature or
    collection refers to it: a node that a signature reads runs whenever
    the signature does, so its function is then checked as any other.
    """
    graph = meta_graph.graph_def
    saver = meta_graph.saver_def
    nodes = {node.name: node for node in graph.node}
    filename = _node_name(saver.filename_tensor_name)
    if filename not in nodes or nodes[filename].op != "Placeholder":
        return None, None
    referenced = {_node_name(name) for node in graph.node for name in node.input}
    referenced |= {_node_name(string) for string in _strings(meta_graph.signature_def)}
    referenced |= {_node_name(string) for string in _strings(meta_graph.collection_def)}

    def inert(tensor_name):
        name = _node_name(tensor_name) if tensor_name else None
        node = nodes.get(name)
        if node is None or node.op not in _CALL_OPS or name in referenced:
            return None
        return name if node.input and _node_name(node.input[0]) == filename else None

    save, restore = inert(saver.save_tensor_name), inert(saver.restore_op_name)
    return (save, restore) if save != restore else (None, None)


def _node(graph, name):
    return next(node for node in graph.node if node.name == name)


def _node_name(tensor_name):
    return tensor_name.lstrip("^").split(":")[0]


def _strings(message):
    """Every string value in a protocol buffer message or a map of messages, at any depth."""
    found, waiting = set(), list(message.values()) if hasattr(message, "values") else [message]
    while waiting:
        value = waiting.pop()
        if isinstance(value, str):
            found.add(value)
            continue
        if not hasattr(value, "ListFields"):
            continue  # numbers, bytes, enums
        for field, field_value in value.ListFields():
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                waiting.extend(field_value.keys())
                waiting.extend(field_value[key] for key in field_value)
            elif field.label == field.LABEL_REPEATED if hasattr(field, "label") else field.is_repeated:
                waiting.extend(field_value[index] for index in range(len(field_value)))
            else:
                waiting.append(field_value)
    return found


def _callees(node, functions):
    """The library functions a node calls: by its op, or by a function attribute (calls, loops, branches)."""
    names = {node.op} if node.op in functions else set()
    for value in node.attr.values():
        if value.HasField("func"):
            names.add(value.func.name)
        names.update(function.name for function in value.list.func)
    return names & set(functions)


def _reachable(roots, functions, gradients):
    seen, waiting = set(), list(roots)
    while waiting:
        name = waiting.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in functions[name].node_def:
            waiting.extend(_callees(node, functions))
        if name in gradients:
            waiting.append(gradients[name])
    return seen
