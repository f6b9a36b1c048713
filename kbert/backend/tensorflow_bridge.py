"""A Keras model called from TensorFlow code, whichever backend Keras runs on.

kbert's text side (tokenizers, window building, span and tag decoding,
serving signatures) is TensorFlow and TF-Text code, run eagerly or in a
`tf.function`. On the TensorFlow backend the model runs in the same graph;
on JAX and PyTorch it runs as it is, called from the graph through
`tf.py_function`. Only the text side imports this module, so TensorFlow is
not imported where kbert runs without it.
"""

import keras
import numpy as np
import tensorflow as tf


def cast_to_float32(values):
    """A tensor, or a nested structure of them, cast to float32 (model outputs may be bfloat16).

    Example:
    >>> cast_to_float32({"logits": tf.constant([1.5], tf.bfloat16)})["logits"].dtype.name
    'float32'
    """
    return tf.nest.map_structure(lambda value: tf.cast(value, tf.float32), values)


def model_outputs(model, inputs):
    """`model(inputs, training=False)` as float32 TensorFlow tensors, on any Keras backend.

    On the TensorFlow backend the model runs in the caller's graph. On JAX
    and PyTorch it is called from the graph through `tf.py_function` with
    NumPy values, and its outputs come back as float32 tensors with the
    shapes the model declares (a graph needs them to go on).

    Args:
        model: a functional Keras model (a kbert task model).
        inputs: a dict of int tensors, the model's inputs by name.

    Returns:
        The model's outputs, float32, in the structure the model returns.

    Example:
    >>> token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    >>> model = keras.Model({"token_ids": token_ids}, {"doubled": keras.ops.cast(token_ids, "float32") * 2})
    >>> doubled = tf.function(lambda inputs: model_outputs(model, inputs)["doubled"])
    >>> doubled({"token_ids": tf.constant([[1, 2]])}).numpy().tolist()
    [[2.0, 4.0]]
    """
    if keras.config.backend() == "tensorflow":
        return cast_to_float32(model(inputs, training=False))
    names = sorted(inputs)
    declared = keras.tree.flatten(model.output)

    def call(*values):
        outputs = model(dict(zip(names, (value.numpy() for value in values))), training=False)
        return [np.asarray(keras.ops.convert_to_numpy(value), "float32") for value in keras.tree.flatten(outputs)]

    flat = tf.py_function(call, [inputs[name] for name in names], [tf.float32] * len(declared))
    for value, spec in zip(flat, declared):
        value.set_shape(spec.shape)
    return keras.tree.pack_sequence_as(model.output, flat)
