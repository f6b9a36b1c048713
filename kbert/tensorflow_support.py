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
import sys

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
