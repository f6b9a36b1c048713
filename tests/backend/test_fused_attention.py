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
    # Attention dropout is applied by the explicit path, with Keras' seeds.
    assert attend(query, key, value, padding_mask, keras.layers.Dropout(0.1), True) is None
    np.testing.assert_allclose(numpy(attend(query, key, value, padding_mask, keras.layers.Dropout(0.1), False)),
                               numpy(expected), atol=1e-5)
