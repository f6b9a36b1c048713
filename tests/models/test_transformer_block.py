import keras
import keras_hub
import numpy as np
import pytest

from kbert.backend import gradient_function
from kbert.models.encoder import gelu_approximate
from kbert.models.transformer_block import TransformerBlock
from tests.test_case import assert_all_close, numpy, run_layer_test, run_precision_test

# The block is each backend's own code (kbert.backend.transformer_block): all of it runs on every backend.
pytestmark = pytest.mark.all_backends

HIDDEN, HEADS, INTERMEDIATE = 32, 4, 64


def block_pair(activation="gelu", dropout=0.0, dtype=None):
    """A lean block and keras-hub's, built for (2, 7, HIDDEN), with the same random weights."""
    settings = dict(intermediate_dim=INTERMEDIATE, num_heads=HEADS, dropout=dropout, activation=activation,
                    layer_norm_epsilon=1e-12, dtype=dtype)
    lean, reference = TransformerBlock(**settings), keras_hub.layers.TransformerEncoder(**settings)
    lean.build((2, 7, HIDDEN))
    reference.build((2, 7, HIDDEN))
    rng = np.random.default_rng(0)
    # Random biases and LayerNorm parameters too, so that none of them can be skipped unnoticed.
    reference.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32") for w in reference.get_weights()])
    lean.set_weights(reference.get_weights())
    return lean, reference


def inputs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, HIDDEN)).astype("float32")
    padding_mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1] * 7], "int32")
    return keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(padding_mask)


def test_the_same_variables_as_keras_hubs_block():
    lean, reference = block_pair()
    assert [(v.path.split("/", 1)[1], v.shape) for v in lean.weights] == [
        (v.path.split("/", 1)[1], v.shape) for v in reference.weights
    ]


@pytest.mark.parametrize("activation", ["gelu", gelu_approximate])
def test_outputs_equal_keras_hubs_block(activation):
    lean, reference = block_pair(activation)
    x, padding_mask = inputs()
    expected = reference(x, padding_mask=padding_mask)
    assert_all_close(lean(x, padding_mask=padding_mask), expected, atol=1e-5)
    # Without a mask every token attends to every other.
    assert_all_close(lean(x), reference(x), atol=1e-5)


def test_attention_probabilities_equal_keras_hubs_block():
    lean, reference = block_pair()
    x, padding_mask = inputs()
    output, probabilities = lean(x, padding_mask=padding_mask, return_attention_scores=True)
    expected_output, expected_probabilities = reference(x, padding_mask=padding_mask, return_attention_scores=True)
    assert_all_close(output, expected_output, atol=1e-5)
    assert_all_close(probabilities, expected_probabilities, atol=1e-6)
    # Padding gets no attention.
    assert np.all(numpy(probabilities)[0, :, :, 4:] == 0)


def test_training_gradients_equal_keras_hubs_block():
    lean, reference = block_pair()
    x, padding_mask = inputs()

    weights = keras.ops.sin(keras.ops.arange(HIDDEN, dtype="float32"))

    def gradients(block):
        # The input's gradient too: a variable holding it, put in front of the block.
        source = keras.Variable(x, name="inputs")

        def loss():
            return keras.ops.sum(block(source.value, padding_mask=padding_mask, training=True) * weights)

        return gradient_function(loss, [source, *block.trainable_variables])()

    lean_gradients, reference_gradients = gradients(lean), gradients(reference)
    assert len(lean_gradients) == len(reference_gradients) == 1 + 16
    for got, expected in zip(lean_gradients, reference_gradients):
        assert np.abs(numpy(expected)).max() > 0
        np.testing.assert_allclose(numpy(got), numpy(expected), atol=1e-5, rtol=1e-5)


def test_dropout_applies_in_training_only():
    lean, _ = block_pair(dropout=0.3)
    x, padding_mask = inputs()
    assert_all_close(lean(x, padding_mask=padding_mask), lean(x, padding_mask=padding_mask))
    first = numpy(lean(x, padding_mask=padding_mask, training=True))
    second = numpy(lean(x, padding_mask=padding_mask, training=True))
    assert not np.allclose(first, second)


def test_attention_dropout_drops_out_the_attention_probabilities_alone():
    lean, reference = block_pair()
    x, padding_mask = inputs()
    # With no other dropout, training is inference unless the attention probabilities drop out.
    assert_all_close(lean(x, padding_mask=padding_mask, training=True), lean(x, padding_mask=padding_mask))
    attention_only = TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=HEADS, dropout=0.0,
                                            attention_dropout=0.5, activation="gelu", layer_norm_epsilon=1e-12)
    attention_only.build((2, 7, HIDDEN))
    # Another rate for the attention probabilities leaves keras-hub's variables and their order.
    assert [(v.path.split("/", 1)[1], v.shape) for v in attention_only.weights] == [
        (v.path.split("/", 1)[1], v.shape) for v in reference.weights
    ]
    attention_only.set_weights(reference.get_weights())
    assert_all_close(attention_only(x, padding_mask=padding_mask), reference(x, padding_mask=padding_mask),
                     atol=1e-5)
    trained = numpy(attention_only(x, padding_mask=padding_mask, training=True))
    assert not np.allclose(trained, numpy(reference(x, padding_mask=padding_mask)), atol=1e-3)


def test_only_the_post_layer_norm_block_is_made():
    with pytest.raises(ValueError, match="post-LayerNorm"):
        TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=HEADS, normalize_first=True)
    # Configs written when the block was keras-hub's carry normalize_first=False.
    assert TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=HEADS,
                                  normalize_first=False).get_config()["normalize_first"] is False


def call_block(block, inputs):
    x, padding_mask = inputs
    return block(x, padding_mask=padding_mask)


def test_layer_harness():
    lean, _ = block_pair()
    run_layer_test(lean, inputs(), call=call_block)


def test_precision_harness():
    def make(policy):
        return TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=HEADS, dropout=0.0,
                                      activation="gelu", layer_norm_epsilon=1e-12, dtype=policy)

    run_precision_test(make, inputs(), call=call_block)


@pytest.mark.tensorflow_backend
def test_projections_are_plain_matmuls():
    """The graph the block is built for: 6 matmuls (Q, K, V, attention output, 2 feed-forward) and 2 batched ones."""
    import tensorflow as tf

    lean, _ = block_pair()
    x, padding_mask = inputs()
    graph = tf.function(lambda x, m: lean(x, padding_mask=m)).get_concrete_function(x, padding_mask).graph
    types = [op.type for op in graph.get_operations()]
    assert types.count("MatMul") == 6
    assert types.count("BatchMatMulV2") == 2
    assert "Einsum" not in types


def test_heads_of_a_pruned_block_keep_their_size():
    block = TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=1, head_dim=HIDDEN // HEADS)
    x, padding_mask = inputs()
    assert block(x, padding_mask=padding_mask).shape == (2, 7, HIDDEN)
    assert tuple(block.self_attention_layer.query_dense.kernel.shape) == (HIDDEN, 1, HIDDEN // HEADS)
    assert tuple(block.self_attention_layer.output_dense.kernel.shape) == (1, HIDDEN // HEADS, HIDDEN)


def test_config_round_trip():
    x, padding_mask = inputs()
    for block in [block_pair(activation=gelu_approximate)[0],
                  TransformerBlock(intermediate_dim=INTERMEDIATE, num_heads=2, head_dim=4,
                                         attention_dropout=0.0, dropout=0.1)]:
        block(x)
        config = block.get_config()
        restored = TransformerBlock.from_config(config)
        assert restored.get_config() == config
        restored.build(x.shape)
        restored.set_weights(block.get_weights())
        assert_all_close(restored(x, padding_mask=padding_mask), block(x, padding_mask=padding_mask))
    assert restored.head_dim == 4 and restored.attention_dropout == 0.0 and restored.dropout == 0.1
    assert keras.saving.get_registered_object("kbert>TransformerBlock") is TransformerBlock
