"""Writes `allowed_ops.txt`: the ops TF Serving's model server registers.

The list is the ops of the model server release users run, not of the
TensorFlow installed here. TF Serving 2.20.0 (the `tensorflow/serving:2.20.0`
image) is built from TensorFlow 2.20.0 and links TF-Text 2.20.0
(`org_tensorflow_text`, `text-2.20.0`, in its `tensorflow_serving/workspace.bzl`).
So the list is

1. every op TensorFlow 2.20.0 registers, read from the op registry of that
   TensorFlow before TF-Text is imported, and
2. the ops importing TF-Text 2.20.0 adds to that registry.

Both versions are installed in a throwaway virtual environment, away from
kbert's own (which runs a newer TensorFlow), and this file is run there as a
file (it imports neither kbert nor Keras):

    python3.11 -m venv /tmp/tf-serving-2.20
    /tmp/tf-serving-2.20/bin/pip install tensorflow-cpu==2.20.0
    /tmp/tf-serving-2.20/bin/pip install --no-deps tensorflow-text==2.20.0
    /tmp/tf-serving-2.20/bin/python kbert/serving/make_op_allowlist.py

(`--no-deps`: TF-Text's wheel asks for the `tensorflow` package, of which
`tensorflow-cpu` is the same build without GPU libraries.) The script refuses
to run on other versions. For a later TF Serving release, change the three
versions below to the TensorFlow and TF-Text that release names, and run it
again.

The model server is built from the same TensorFlow source as that pip
package, so it has the ops the package registers and no later ones: an op
TensorFlow adds afterwards (`DecodeJxl`, new in 2.21) is missing there, and
a SavedModel using it fails to load with "Op type not registered".
"""

import sys
from pathlib import Path

TF_SERVING = "2.20.0"
TENSORFLOW = "2.20.0"
TF_TEXT = "2.20.0"


def registered_ops():
    """The names of every op in this process's op registry."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    buffer = pywrap_tf_session.TF_GetAllOpList()
    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(buffer))
    return {op.name for op in ops.op}


def main():
    import tensorflow

    if tensorflow.__version__ != TENSORFLOW:
        raise SystemExit(f"Found TensorFlow {tensorflow.__version__}; TF Serving {TF_SERVING} is built from "
                         f"TensorFlow {TENSORFLOW}. Run this in the virtual environment described here:\n{__doc__}")
    core = registered_ops()  # before TF-Text's op libraries load
    import tensorflow_text

    if tensorflow_text.__version__ != TF_TEXT:
        raise SystemExit(f"Found TF-Text {tensorflow_text.__version__}; TF Serving {TF_SERVING} links "
                         f"TF-Text {TF_TEXT}. Install tensorflow-text=={TF_TEXT} (see below).\n{__doc__}")
    text_ops = registered_ops() - core
    header = [
        "# The ops TF Serving's model server registers: a SavedModel using any other op fails to load there.",
        f"# Served by: TF Serving {TF_SERVING} (TensorFlow {TENSORFLOW}, TF-Text {TF_TEXT})",
        f"# TensorFlow {TENSORFLOW}: {len(core)} ops, then TF-Text {TF_TEXT}: {len(text_ops)} ops.",
        "# Made by kbert/serving/make_op_allowlist.py, which says how to make it again.",
    ]
    path = Path(__file__).with_name("allowed_ops.txt")
    path.write_text("\n".join(header + sorted(core) + sorted(text_ops)) + "\n")
    print(f"Wrote {path}: {len(core)} TensorFlow {TENSORFLOW} ops, {len(text_ops)} TF-Text {TF_TEXT} ops.")


if __name__ == "__main__":
    if len(sys.argv) != 1:
        raise SystemExit(__doc__)
    main()
