"""Writes `allowed_ops.txt`: the ops a kbert SavedModel may use to run in TF Serving.

Run as a file, not as a module (importing kbert would load TF-Text first):

    pip download tensorflow-text==2.12.1 --no-deps --only-binary=:all: \\
        --python-version 3.11 --platform manylinux2014_x86_64 -d /tmp/tft
    .venv/bin/python kbert/serving/make_op_allowlist.py /tmp/tft/tensorflow_text-2.12.1-*.whl

The list is

1. every op core TensorFlow registers (read from the op registry of the
   installed TensorFlow before TF-Text is imported), and
2. the TF-Text ops of the installed tensorflow-text that TF-Text 2.12.1
   also registers. TF Serving's released model servers link TF-Text 2.12.1
   (tensorflow/serving#2267 and #4057: models using newer TF-Text ops fail
   there with "Op type not registered 'TFText>RoundRobinTrim'"). A TF-Text
   op counts as registered by 2.12.1 when its name appears as a whole
   C string in that wheel's op libraries. RoundRobinTrim (keras-hub's and
   TF-Text's `RoundRobinTrimmer`) is not among them.
"""

import re
import sys
import zipfile
from pathlib import Path


def registered_ops():
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    buffer = pywrap_tf_session.TF_GetAllOpList()
    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(buffer))
    return {op.name for op in ops.op}


def c_strings_in_op_libraries(wheel):
    """Every NUL-terminated printable string in the wheel's `.so` files."""
    strings = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".so"):
                strings.update(s.decode() for s in re.findall(rb"[\x20-\x7e]{3,}(?=\x00)", archive.read(name)))
    return strings


def main(wheel):
    import tensorflow  # noqa: F401  (core ops only)

    core = registered_ops()
    import tensorflow_text  # noqa: F401

    tf_text_ops = registered_ops() - core
    served = c_strings_in_op_libraries(wheel)
    allowed_text_ops = sorted(op for op in tf_text_ops if op in served)
    left_out = sorted(tf_text_ops - set(allowed_text_ops))
    header = [
        "# Ops a kbert SavedModel may use so TF Serving can run it; made by kbert/serving/make_op_allowlist.py.",
        f"# Core TensorFlow {tensorflow.__version__}: {len(core)} ops. "
        f"TF-Text {tensorflow_text.__version__} ops also in TF-Text 2.12.1 "
        f"({Path(wheel).name}): {len(allowed_text_ops)}.",
        f"# TF-Text ops left out (not in 2.12.1): {', '.join(left_out)}.",
    ]
    path = Path(__file__).with_name("allowed_ops.txt")
    path.write_text("\n".join(header + sorted(core) + allowed_text_ops) + "\n")
    print(f"Wrote {path}: {len(core)} core ops, {len(allowed_text_ops)} TF-Text ops; left out {left_out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
