"""The fused attention kernel of the backend Keras runs on (JAX's, PyTorch's), beside the explicit computation."""

import importlib

import keras
import numpy as np
import pytest

from kbert.backend.portable import explicit_attention
from tests.test_case import BACKEND, numpy

# Each backend's own kernel, on that backend (TensorFlow's block has none: it is one graph of 2-D ops).
pytestmark = [
    pytest.mark.all_backends,
    pytest.mark.skipif(BACKEND == "tensorflow", reason="TensorFlow's block attends without a fused kernel"),
]


def test_training_attends_through_the_fused_kernel_unless_probabilities_drop_out():
    rng = np.random.default_rng(0)
    query, key, value = (keras.ops.convert_to_tensor(rng.normal(size=(2, 6, 2, 8)).astype("float32"))
                         for _ in range(3))
    padding_mask = keras.ops.convert_to_tensor(np.array([[1, 1, 1, 1, 0, 0], [1] * 6], "int32"))
    attend = importlib.import_module(f"kbert.backend.{BACKEND}").dot_product_attention
    expected, _ = explicit_attention(query, key, value, padding_mask, keras.layers.Dropout(0.0), training=False)
    for training in (False, True):
        fused = attend(query, key, value, padding_mask, keras.layers.Dropout(0.0), training)
        np.testing.assert_allclose(numpy(fused), numpy(expected), atol=1e-5)
    # A layer with seeds of its own drops out on the explicit path, with them;
    # so does every dropping layer on JAX, whose public kernel cannot drop out.
    assert attend(query, key, value, padding_mask, keras.layers.Dropout(0.1, seed=3), True) is None
    dropped = attend(query, key, value, padding_mask, keras.layers.Dropout(0.1), True)
    assert (dropped is None) == (BACKEND == "jax")
    np.testing.assert_allclose(numpy(attend(query, key, value, padding_mask, keras.layers.Dropout(0.1), False)),
                               numpy(expected), atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's kernel drops out itself; JAX's public one cannot")
def test_the_fused_kernel_drops_out_as_the_explicit_path_does_in_distribution_and_from_keras_seed():
    from kbert.backend.torch import dot_product_attention

    rng = np.random.default_rng(0)
    query, key, value = (keras.ops.convert_to_tensor(rng.normal(size=(2, 6, 2, 8)).astype("float32"))
                         for _ in range(3))
    padding_mask = keras.ops.convert_to_tensor(np.array([[1, 1, 1, 1, 0, 0], [1] * 6], "int32"))
    dropout = keras.layers.Dropout(0.3)  # as keras-hub's attention has it: no seed of its own
    draws = 400

    def sample(attend):
        return np.stack([numpy(attend()) for _ in range(draws)])

    keras.utils.set_random_seed(1)
    fused = sample(lambda: dot_product_attention(query, key, value, padding_mask, dropout, True))
    explicit = sample(lambda: explicit_attention(query, key, value, padding_mask, dropout, True)[0])
    # Both are unbiased: their mean is attention without dropout; and they spread alike.
    expected, _ = explicit_attention(query, key, value, padding_mask, dropout, training=False)
    standard_error = explicit.std(axis=0) / np.sqrt(draws)
    for outputs in (fused, explicit):
        assert np.mean(np.abs(outputs.mean(axis=0) - numpy(expected)) / standard_error) < 1.2
    assert fused.var(axis=0).mean() == pytest.approx(explicit.var(axis=0).mean(), rel=0.08)
    # Keras' seed fixes the masks: the same draws again.
    keras.utils.set_random_seed(1)
    np.testing.assert_array_equal(sample(lambda: dot_product_attention(query, key, value, padding_mask,
                                                                       dropout, True))[:3], fused[:3])


@pytest.mark.skipif(BACKEND != "jax", reason="cuDNN's lengths are JAX's fast path")
def test_padding_a_length_cannot_say_is_attended_by_its_mask():
    # cuDNN takes each row's length: [1, 0, 1, 1] is not "the first 3 tokens".
    from kbert.backend.jax import attend_by_lengths

    rng = np.random.default_rng(0)
    query, key, value = (keras.ops.convert_to_tensor(rng.normal(size=(2, 6, 2, 8)).astype("float32"))
                         for _ in range(3))

    def by_lengths(query, key, value, lengths):  # stands for cuDNN's kernel, which needs a GPU
        return keras.ops.zeros_like(query)

    trailing = keras.ops.convert_to_tensor(np.array([[1, 1, 1, 0, 0, 0], [1] * 6], "int32"))
    np.testing.assert_array_equal(numpy(attend_by_lengths(query, key, value, trailing, by_lengths)), 0)
    holes = keras.ops.convert_to_tensor(np.array([[1, 0, 1, 1, 0, 0], [1] * 6], "int32"))
    expected, _ = explicit_attention(query, key, value, holes, keras.layers.Dropout(0.0), training=False)
    np.testing.assert_allclose(numpy(attend_by_lengths(query, key, value, holes, by_lengths)), numpy(expected),
                               atol=1e-5)
