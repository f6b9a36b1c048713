"""Base class for kbert's string-processing Keras layers."""

import keras
import tensorflow as tf


class PreprocessingLayer(keras.layers.Layer):
    """A Keras layer that takes strings and runs TensorFlow ops only.

    Preprocessing runs inside `tf.data` pipelines and inside exported
    SavedModels, so it stays in TensorFlow whatever the Keras backend, never
    builds weights, and is never trained. Inputs are left as they are (no
    float casting), which string tensors need.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True
        self.trainable = False


def to_string_tensor(texts, name="texts"):
    """Converts lists, NumPy arrays and tensors of text to a `tf.string` tensor."""
    if isinstance(texts, (tf.Tensor, tf.RaggedTensor)):
        if texts.dtype != tf.string:
            raise TypeError(
                f"`{name}` must hold strings, got a tensor of dtype {texts.dtype.name}."
            )
        return texts
    if isinstance(texts, (str, bytes)):
        return tf.constant(texts)
    try:
        tensor = tf.convert_to_tensor(texts)
    except (ValueError, TypeError) as error:
        raise TypeError(f"`{name}` must be strings; could not convert: {error}") from None
    if tensor.dtype != tf.string:
        raise TypeError(f"`{name}` must hold strings, got values of dtype {tensor.dtype.name}.")
    return tensor
