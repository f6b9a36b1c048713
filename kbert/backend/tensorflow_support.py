"""TensorFlow where kbert needs it, and one clear error where it is not installed.

kbert's models (encoders, task models, the pretrainer, the distillers) are
Keras 3 code: they build, train on token ids, save and load on JAX or PyTorch
without TensorFlow. TensorFlow is what kbert's text side is made of: the
TF-Text tokenizers and preprocessors, the `tf.data` pipelines that feed raw
text to `fit`, SavedModel export and TensorBoard event files. Those parts
import it; where it is not installed, asking for them raises
`TensorFlowMissingError`, which says what needs it and how to get it.
"""

import functools
import os
import re
import sys
import tempfile

INSTALL = "pip install tensorflow tensorflow-text"


class TensorFlowMissingError(ImportError):
    """A part of kbert that runs on TensorFlow was asked for where TensorFlow is not installed."""


def missing_message(feature):
    return (
        f"{feature} needs TensorFlow and TensorFlow Text, which are not installed ({INSTALL}). "
        "Without them kbert's models build, train on token ids (dicts of token_ids, segment_ids "
        "and padding_mask) and save and load on the jax and torch backends."
    )


@functools.cache
def tensorflow_installed():
    """Whether TensorFlow imports here (it is imported to find out)."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


# What TensorFlow's C++ side writes to stderr while it loads, before its log
# level applies (absl's logging is not initialized yet, so the lines come
# whatever TF_CPP_MIN_LOG_LEVEL says): info lines such as "oneDNN custom
# operations are on" and "Could not find cuda drivers", and absl's banner that
# says so. Nothing in them asks a user to act; warnings and errors pass.
_LOAD_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    r"|I\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
)


def is_load_noise(line):
    """Whether `line` is one of the info lines TensorFlow's C++ side prints while it loads (nothing to act on)."""
    return _LOAD_NOISE.match(line.rstrip("\n")) is not None


def import_tensorflow_quietly():
    """Imports TensorFlow (where installed) without the info lines its C++ side prints while loading.

    Other lines it writes to stderr meanwhile (warnings, errors) are passed
    on. For the `kbert` command: a healthy run prints nothing that reads
    like an alarm. Does nothing where TensorFlow is loaded already.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)  # C++ writes to the descriptor, not to sys.stderr
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass  # a jax or torch install without TensorFlow: `tensorflow_installed` says so
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not is_load_noise(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def require_tensorflow(feature):
    """The `tensorflow` module, or `TensorFlowMissingError` naming `feature` ("Raw-text fit", ...)."""
    if not tensorflow_installed():
        raise TensorFlowMissingError(missing_message(feature))
    import tensorflow

    return tensorflow


def is_tf_dataset(value):
    """Whether `value` is a `tf.data.Dataset` (False, without importing TensorFlow, where it is not loaded)."""
    tensorflow = sys.modules.get("tensorflow")
    return tensorflow is not None and isinstance(value, tensorflow.data.Dataset)
