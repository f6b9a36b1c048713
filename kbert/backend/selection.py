"""Which Keras backend kbert runs on, and TensorFlow's settings around it, decided before Keras loads.

Standard library only: `import kbert` calls `choose_backend` before
anything imports Keras or TensorFlow, whose choices (the backend, the log
level, oneDNN kernels) are read once, when they load.
"""

import importlib.util
import json
import os
import sys

# The backends kbert runs on, in the order a machine without a configured
# one takes them: TensorFlow, which kbert's text side runs on anyway, then
# JAX, then PyTorch, where TensorFlow is not installed.
BACKENDS = ("tensorflow", "jax", "torch")


def configured_backend():
    """The Keras backend chosen for this process (KERAS_BACKEND, or keras.json), or None where Keras would take its default."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as file:
            return json.load(file).get("backend")
    except (OSError, ValueError, AttributeError):
        return None


def installed(name):
    """Whether the library `name` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def choose_backend(quiet):
    """Sets Keras' backend and TensorFlow's settings in the environment; True where TensorFlow was loaded before.

    - `KERAS_BACKEND`: the configured backend, else the first of `BACKENDS`
      installed. It is set in any case: the `kbert` command's `--backend`
      changes it before Keras loads, and what kbert loads follows it.
    - `TF_CPP_MIN_LOG_LEVEL` (unless the user set it): TensorFlow's C++ log
      keeps warnings and errors, or none where `quiet` (the `kbert`
      command). On a machine without a GPU TensorFlow logs "failed call to
      cuInit" (and, on some CPUs, that oneDNN runs int64 ops on other
      kernels) as errors on every healthy run, while the errors that matter
      reach the command as exceptions, printed in one line.
    - `TF_ENABLE_ONEDNN_OPTS=1` (unless the user set it), where TensorFlow is
      not loaded yet: TensorFlow turns its oneDNN kernels on only on CPUs
      with AVX-512 VNNI or AMX, and on the others (AVX2 Xeons, EPYCs) they
      run BERT up to 1.75x faster than its default kernels
      (benchmarks/speed.py). Where TensorFlow came first, `kbert.backend.
      onednn` warns, with the fix.
    """
    os.environ["KERAS_BACKEND"] = configured_backend() or next(
        (name for name in BACKENDS if installed(name)), BACKENDS[0]
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3" if quiet else "2")
    tensorflow_loaded_first = "tensorflow" in sys.modules
    if not tensorflow_loaded_first:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    return tensorflow_loaded_first


def use_backend(name, asked_by):
    """Makes `name` Keras' backend, before Keras loads; a ValueError naming `asked_by` once Keras has loaded on another."""
    loaded_on = os.environ.get("KERAS_BACKEND")
    if "keras" in sys.modules and loaded_on != name:
        raise ValueError(f"{asked_by} {name}: Keras was loaded already, on {loaded_on}.")
    os.environ["KERAS_BACKEND"] = name


def keep_tensorflow_off_accelerators():
    """On a backend other than TensorFlow, TensorFlow only preprocesses: it must not take the GPUs' memory."""
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow had started on its devices already
        pass
