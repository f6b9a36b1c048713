"""Refuses a SavedModel whose graph can reach files, the network or other processes, before it is loaded."""

import os
from pathlib import Path

SAFE_OPS = Path(__file__).with_name("safe_ops.txt")
# The ops of the two functions that every TF2 SavedModel holds to save and
# restore its variables (named by the meta graph's `saver_def`). kbert loads
# with `tf.saved_model.load`, which restores the variables itself, with ops
# of its own, and never runs these functions; a model server runs only the
# restore function, on the model's own `variables/`. So these ops are
# allowed inside those two functions (and what only they call), and refused
# anywhere else: a signature or initializer that calls a saver function is
# checked as any other code.
SAVER_OPS = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename"})


def check_safe_to_load(path):
    """Raises unless every op of the SavedModel at `path` is safe to run; returns its ops.

    A SavedModel is a program: loading it runs its initializers, and
    calling it runs its graph, with the user's rights. kbert runs one only
    when its graph and every function of its library use nothing but the
    ops of `safe_ops.txt`, which compute in memory and never read or write
    files, reach the network, run Python or end the process
    (`make_safe_ops.py` says how the list is made). The checkpoint ops of
    the SavedModel's own save and restore functions are allowed there only.

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
        raise ValueError(
            f"Refused to load the SavedModel at {path}: a SavedModel is a program, and this one uses ops "
            f"that can reach files, the network or other processes, or that kbert does not know as safe: "
            f"{sorted(unsafe)}; pass --trust (trust=True in Python) only for a model whose source you trust."
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
        saver = meta_graph.saver_def
        saver_nodes = {_node_name(name) for name in (saver.save_tensor_name, saver.restore_op_name) if name}
        # What the loader may run: the graph's nodes, and every function the
        # object graph restores (initializers, signatures, methods).
        checked_roots = set(meta_graph.object_graph_def.concrete_functions)
        saver_roots = set()
        for node in graph.node:
            ops.add(node.op)
            if node.op not in functions and node.op not in safe:
                unsafe.add(node.op)
            (saver_roots if node.name in saver_nodes else checked_roots).update(_callees(node, functions))
        saver_only = _reachable(saver_roots, functions) - _reachable(checked_roots, functions)
        for name, function in functions.items():
            allowed = safe | SAVER_OPS if name in saver_only else safe
            for node in function.node_def:
                if node.op in functions:
                    continue  # a call of a library function, checked as a function
                ops.add(node.op)
                if node.op not in allowed:
                    unsafe.add(node.op)
    return ops, unsafe


def _node_name(tensor_name):
    return tensor_name.lstrip("^").split(":")[0]


def _callees(node, functions):
    """The library functions a node calls: by its op, or by a function attribute (calls, loops, branches)."""
    names = {node.op} if node.op in functions else set()
    for value in node.attr.values():
        if value.HasField("func"):
            names.add(value.func.name)
        names.update(function.name for function in value.list.func)
    return names & set(functions)


def _reachable(roots, functions):
    seen, waiting = set(), list(roots)
    while waiting:
        name = waiting.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in functions[name].node_def:
            waiting.extend(_callees(node, functions))
    return seen
