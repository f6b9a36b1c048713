"""Which ops an exported SavedModel uses, checked against the ops TF Serving has."""

import os
from pathlib import Path

ALLOWLIST = Path(__file__).with_name("allowed_ops.txt")
_SERVED_BY = "# Served by: "


def allowed_ops():
    """The op names of `allowed_ops.txt` (how it is made: `make_op_allowlist.py`)."""
    lines = ALLOWLIST.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def served_by():
    """The model server release the allowlist is made from, e.g. "TF Serving 2.20.0 (TensorFlow 2.20.0, ...)"."""
    for line in ALLOWLIST.read_text().splitlines():
        if line.startswith(_SERVED_BY):
            return line[len(_SERVED_BY):].strip()
    return "TF Serving's model server"


def saved_model_ops(path):
    """Every op type in a SavedModel's graph and in all the functions of its library."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.fspath(path)
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        functions = {function.signature.name for function in graph.library.function}
        ops.update(node.op for node in graph.node)
        for function in graph.library.function:
            ops.update(node.op for node in function.node_def)
        ops -= functions  # a node may call a library function by its name
    return ops


def unserved_ops(ops):
    """The ops of `ops` that are not on the allowlist, sorted."""
    return sorted(set(ops) - allowed_ops())


def check_ops(path):
    """Returns the ops of the SavedModel at `path`; raises if one is not on the allowlist.

    The allowlist is the ops of the TF Serving release named in
    `allowed_ops.txt` (its TensorFlow and TF-Text): an op that a newer
    TensorFlow added is refused, as that model server would refuse it.

    Raises:
        ValueError: naming the ops TF Serving would not find.
    """
    ops = saved_model_ops(path)
    missing = unserved_ops(ops)
    if missing:
        raise ValueError(
            f"The SavedModel at {path} uses ops that {served_by()} lacks: {missing}."
        )
    return ops
