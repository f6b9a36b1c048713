"""`model_outputs`: a model on any Keras backend, called from a `tf.function`, gives float32 tensors of its shapes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.backend.tensorflow_bridge import cast_to_float32, model_outputs

pytestmark = pytest.mark.all_backends


def two_output_model():
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    embedded = keras.layers.Embedding(10, 3, dtype="bfloat16")(token_ids)
    masked = embedded * keras.ops.cast(padding_mask, "bfloat16")[..., None]
    pooled = keras.ops.sum(masked, axis=1)
    return keras.Model(
        {"token_ids": token_ids, "padding_mask": padding_mask},
        {"per_token": masked, "pooled": pooled},
    )


def test_outputs_in_a_graph_are_float32_with_the_declared_shapes_and_equal_the_model():
    keras.utils.set_random_seed(0)
    model = two_output_model()
    inputs = {"token_ids": np.array([[1, 2, 3], [4, 5, 0]], "int32"),
              "padding_mask": np.array([[1, 1, 1], [1, 1, 0]], "int32")}
    seen = {}

    # Shapes unknown to the graph, as a serving signature's.
    @tf.function(input_signature=[{name: tf.TensorSpec([None, None], tf.int32) for name in inputs}])
    def outputs(inputs):
        values = model_outputs(model, inputs)
        seen.update({name: (value.dtype, value.shape.as_list()) for name, value in values.items()})
        return values

    got = outputs({name: tf.constant(value) for name, value in inputs.items()})
    assert seen == {"per_token": (tf.float32, [None, None, 3]), "pooled": (tf.float32, [None, 3])}
    expected = model(inputs, training=False)
    for name in ("per_token", "pooled"):
        np.testing.assert_allclose(
            got[name].numpy(), keras.ops.convert_to_numpy(keras.ops.cast(expected[name], "float32"))
        )


def test_cast_to_float32_casts_every_tensor_of_a_structure():
    cast = cast_to_float32({"a": tf.constant([1.5], tf.bfloat16), "b": [tf.constant([2], tf.int32)]})
    assert cast["a"].dtype == tf.float32 and cast["b"][0].dtype == tf.float32
    assert cast["a"].numpy().tolist() == [1.5] and cast["b"][0].numpy().tolist() == [2.0]
