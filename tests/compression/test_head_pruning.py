import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.backend import gradient_function
from kbert.compression import head_importance, least_important_heads, mask_heads, prune_heads
from kbert.data import task_dataset
from tests.test_case import (
    assert_all_close,
    assert_allclose,
    assert_array_equal,
    numpy,
    run_task_test,
    tiny_classifier,
    tiny_encoder_kwargs,
    TINY_VOCABULARY,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

TEXTS = ["a good film", "a bad film", "the cat sat on the mat", "free prize now!"]
LABELS = [1, 0, 1, 0]


def four_head_classifier(dropout=0.0):
    """Two layers of 4 heads of size 16 / 4; no dropout, so that outputs compare."""
    return tiny_classifier(dropout=dropout, encoder_options={"num_heads": 4})


def encoder_inputs():
    rng = np.random.default_rng(0)
    mask = np.ones((2, 7), "int32")
    mask[1, 5:] = 0
    return {
        "token_ids": rng.integers(5, len(TINY_VOCABULARY), (2, 7)).astype("int32"),
        "segment_ids": np.array([[0] * 4 + [1] * 3] * 2, "int32"),
        "padding_mask": mask,
    }


def logits(model):
    """The model's logits on TEXTS, called directly (faster than `predict` for a new model)."""
    (features, _), = list(task_dataset(model.preprocessor, TEXTS, LABELS, batch_size=len(TEXTS)))
    return numpy(model(features, training=False))


def output_kernel(encoder, layer):
    return encoder.transformer_layers[layer].self_attention_layer.output_dense.kernel


def test_output_kernel_gradient_is_the_head_mask_gradient():
    # On one attention layer, a forward pass written out by hand with an
    # explicit mask xi on each head's output: dL/dxi_h must equal
    # sum(dL/dW_o[h] * W_o[h]), what head_importance computes.
    keras.utils.set_random_seed(0)
    heads, head_dim, hidden = 3, 4, 12
    attention = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=head_dim)
    x = keras.ops.convert_to_tensor(np.random.default_rng(1).normal(size=(2, 5, hidden)).astype("float32"))
    attention(x, x)
    weights = keras.ops.convert_to_tensor(np.random.default_rng(2).normal(size=(2, 5, hidden)).astype("float32"))
    xi = keras.Variable(np.ones(heads, "float32"), name="xi")
    ops = keras.ops

    def masked_forward():
        q, k, v = attention.query_dense(x), attention.key_dense(x), attention.value_dense(x)
        scores = ops.einsum("btnd,bsnd->bnts", q, k) / np.sqrt(head_dim)
        context = ops.einsum("bnts,bsnd->btnd", ops.softmax(scores, axis=-1), v)
        return attention.output_dense(context * xi.value[None, None, :, None])

    assert_allclose(numpy(masked_forward()), numpy(attention(x, x)), atol=1e-5)
    kernel = attention.output_dense.kernel
    mask_gradient, kernel_gradient = gradient_function(
        lambda: ops.sum(masked_forward() * weights), [xi, kernel]
    )()
    mask_gradient = numpy(mask_gradient)
    from_kernel = numpy(ops.sum(kernel_gradient * kernel.value, axis=[1, 2]))
    assert np.abs(mask_gradient).min() > 1e-3  # a real test: no head's gradient vanishes
    assert_allclose(from_kernel, mask_gradient, rtol=1e-4, atol=1e-5)


def test_importance_is_the_loss_derivative_in_each_heads_scale():
    # Finite differences of the loss when head h's output kernel slice (its
    # output) is scaled by 1 +- eps; one batch, so the importance is |dL/dxi_h|.
    keras.utils.set_random_seed(1)
    model = four_head_classifier()
    importance = head_importance(model, TEXTS, LABELS, batch_size=len(TEXTS), normalize=False)
    assert importance.shape == (2, 4)
    (features, labels), = list(task_dataset(model.preprocessor, TEXTS, LABELS, batch_size=len(TEXTS)))

    def loss():
        return float(model.compute_loss(y=labels, y_pred=model(features, training=False), training=False))

    eps = 1e-2
    for layer in range(2):
        kernel = output_kernel(model.encoder, layer)
        original = numpy(kernel)
        for head in range(4):
            values = []
            for scale in (1 + eps, 1 - eps):
                scaled = original.copy()
                scaled[head] *= scale
                kernel.assign(scaled)
                values.append(loss())
            kernel.assign(original)
            derivative = (values[0] - values[1]) / (2 * eps)
            assert_allclose(importance[layer, head], abs(derivative), rtol=0.02, atol=2e-4)


def test_normalized_importance_has_unit_norm_per_layer():
    importance = head_importance(four_head_classifier(), TEXTS, LABELS)
    assert_allclose(np.linalg.norm(importance, axis=1), [1.0, 1.0], rtol=1e-6)


def test_a_silent_head_has_no_importance_and_goes_first():
    keras.utils.set_random_seed(2)
    model = four_head_classifier()
    kernel = output_kernel(model.encoder, 1)
    silenced = numpy(kernel)
    silenced[2] = 0
    kernel.assign(silenced)
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS))
    importance = head_importance(model, dataset, batch_size=2)
    assert importance[1, 2] < 1e-9
    others = np.delete(importance.reshape(-1), 1 * 4 + 2)
    assert others.min() > 1e-4
    assert least_important_heads(importance, fraction=1 / 8) == {1: [2]}
    pruned = prune_heads(model, fraction=1 / 8, x=TEXTS, y=LABELS)
    assert pruned.encoder.heads_per_layer == [4, 3]
    # Removing a head that contributes nothing changes nothing.
    assert_allclose(logits(pruned), logits(model), atol=1e-5)


def test_pruned_computes_what_masked_computes():
    keras.utils.set_random_seed(3)
    model = four_head_classifier()
    # Logits of order 1 (not BERT's initial 1e-3), so that 1e-5 is a close comparison.
    model.output_dense.kernel.assign(model.output_dense.kernel * 300)
    heads = {0: [0, 3], 1: [1]}
    before = [numpy(w) for w in model.weights]
    pruned, masked = prune_heads(model, heads), mask_heads(model, heads)
    for weight, value in zip(model.weights, before):  # the model itself is left as it was
        assert_array_equal(numpy(weight), value)
    assert type(pruned) is kbert.Classifier and pruned.encoder.heads_per_layer == [2, 3]
    assert masked.encoder.heads_per_layer is None
    pruned_logits = logits(pruned)
    assert_all_close(pruned_logits, logits(masked), atol=1e-5)
    assert np.abs(pruned_logits).max() > 0.1
    assert np.abs(pruned_logits - logits(model)).max() > 1e-3  # the heads did matter
    assert_all_close(pruned.encoder(encoder_inputs()), masked.encoder(encoder_inputs()), atol=1e-5)
    # The kept heads' weights are the model's, in order.
    query = numpy(model.encoder.transformer_layers[0].self_attention_layer.query_dense.kernel)
    pruned_query = numpy(pruned.encoder.transformer_layers[0].self_attention_layer.query_dense.kernel)
    assert_array_equal(pruned_query, query[:, [1, 2]])

    # Pruned again, with the pruned model's own head numbers; its importance has NaN past its heads.
    importance = head_importance(pruned, TEXTS, LABELS)
    assert np.isnan(importance[0, 2:]).all() and np.isnan(importance[1, 3])
    assert not np.isnan(importance[0, :2]).any() and not np.isnan(importance[1, :3]).any()
    twice = prune_heads(pruned, {1: [0, 2]})
    assert twice.encoder.heads_per_layer == [2, 1]
    assert_all_close(logits(twice), logits(mask_heads(pruned, {1: [0, 2]})), atol=1e-5)


def test_pruned_encoder_computes_what_masked_computes_and_has_fewer_weights():
    encoder = kbert.Encoder(**{**tiny_encoder_kwargs(), "num_heads": 4, "dropout": 0.0})
    heads = {0: [2], 1: [0, 1, 3]}
    pruned = prune_heads(encoder, heads)
    assert type(pruned) is kbert.Encoder and pruned.heads_per_layer == [3, 1]
    assert_all_close(pruned(encoder_inputs()), mask_heads(encoder, heads)(encoder_inputs()), atol=1e-5)
    head_dim, hidden = 4, 16
    per_head = 3 * (hidden * head_dim + head_dim) + head_dim * hidden
    assert encoder.count_params() - pruned.count_params() == 4 * per_head


def test_pruned_classifier_trains_saves_and_exports(tmp_path):
    keras.utils.set_random_seed(4)
    model = four_head_classifier(dropout=0.1)
    model.compile(learning_rate=1e-3)
    pruned = prune_heads(model, fraction=0.5, x=TEXTS, y=LABELS)
    assert sum(pruned.encoder.heads_per_layer) == 4
    # Compiled as the model was, with a fresh optimizer.
    assert int(pruned.optimizer.iterations) == 0
    assert pruned.get_compile_config() == model.get_compile_config()
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS))
    restored, _ = run_task_test(pruned, TEXTS, LABELS, tmp_path, dataset=dataset, request={"text": TEXTS})
    assert restored.encoder.heads_per_layer == pruned.encoder.heads_per_layer


def test_least_important_heads_keeps_a_head_per_layer_and_skips_pruned_ones():
    importance = np.array([[0.1, 0.2, 0.3], [0.9, np.nan, 0.8], [0.05, 0.5, np.nan]])
    # 7 heads; 4 go: 0.05 and then layer 2 is down to one head, so 0.1, 0.2, then 0.3 is skipped
    # (layer 0's last) for 0.8.
    assert least_important_heads(importance, fraction=4 / 7) == {0: [0, 1], 1: [2], 2: [0]}
    assert least_important_heads(importance, fraction=0.0) == {}
    with pytest.raises(ValueError, match="only 4 can go"):
        least_important_heads(importance, fraction=0.9)
    with pytest.raises(ValueError, match=r"`fraction` must be a number in \[0, 1\), got 1"):
        least_important_heads(importance, fraction=1)


@pytest.mark.parametrize(
    "heads, message",
    [
        ({2: [0]}, "Layer 2 of `heads` is not a layer of the encoder: 0 to 1"),
        ({0: [1, 4, -1]}, r"Heads \[4, -1\] of layer 0 are out of range: the layer has heads 0 to 3"),
        ({0: [0], 1: [0, 1, 2, 3]}, "would leave layer 1 without attention heads"),
    ],
)
def test_bad_heads_are_named(heads, message):
    encoder = kbert.Encoder(**{**tiny_encoder_kwargs(), "num_heads": 4})
    with pytest.raises(ValueError, match=message):
        prune_heads(encoder, heads)


def test_bad_requests_are_named():
    model = four_head_classifier()
    with pytest.raises(ValueError, match="either `heads`"):
        prune_heads(model, {0: [0]}, fraction=0.5)
    with pytest.raises(ValueError, match="either `heads`"):
        prune_heads(model)
    with pytest.raises(ValueError, match="give `importance`"):
        prune_heads(model, fraction=0.5)
    with pytest.raises(ValueError, match=r"must have shape \(2, 4\)"):
        prune_heads(model, fraction=0.5, importance=np.ones((2, 2)))
    with pytest.raises(TypeError, match="Expected a kbert task model"):
        head_importance(model.encoder, TEXTS, LABELS)
    with pytest.raises(ValueError, match="needs targets"):
        head_importance(model, TEXTS)
    albert = kbert.Encoder(**tiny_encoder_kwargs(architecture="albert"))
    with pytest.raises(ValueError, match="shares its Transformer blocks"):
        prune_heads(albert, {0: [0]})


def test_checkpoint_writers_refuse_a_head_pruned_encoder(tmp_path):
    encoder = prune_heads(kbert.Encoder(**tiny_encoder_kwargs()), {1: [0]})
    assert encoder.is_head_pruned
    with pytest.raises(ValueError, match=r"pruned attention heads \(heads_per_layer=\[2, 1\]\)"):
        kbert.save_pretrained(encoder, kbert.Tokenizer(TINY_VOCABULARY), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()
    with pytest.raises(ValueError, match="pruned attention heads"):
        encoder.to_keras_hub()
