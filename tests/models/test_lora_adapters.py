import keras
import numpy as np
import pytest

from kbert.backend import gradient_function
from kbert.models.lora_adapters import LORA_TARGETS, checked_lora_settings, merged_kernel
from kbert.models.transformer_block import TransformerBlock
from tests.models.test_transformer_block import HIDDEN, block_pair, inputs
from tests.test_case import assert_all_close, numpy, run_layer_test

# The adapters are added on each backend's own block (kbert.backend.transformer_block).
pytestmark = pytest.mark.all_backends

RANK = 3


def reference_sublayers(reference):
    """keras-hub's block's projections, by LoRA target."""
    attention = reference._self_attention_layer
    return {"query": attention.query_dense, "key": attention.key_dense, "value": attention.value_dense,
            "attention_output": attention.output_dense, "intermediate": reference._feedforward_intermediate_dense,
            "output": reference._feedforward_output_dense}


def with_random_adapters(block, seed=2):
    """`block`'s adapters set to random values (B too: fresh, B is zero and the update nothing)."""
    rng = np.random.default_rng(seed)
    for a, b in block.lora_adapters.values():
        a.assign(rng.normal(scale=0.3, size=a.shape).astype("float32"))
        b.assign(rng.normal(scale=0.3, size=b.shape).astype("float32"))
    return block


def test_fresh_adapters_leave_the_output_as_it_was():
    lean, _ = block_pair()
    x, padding_mask = inputs()
    before = numpy(lean(x, padding_mask=padding_mask))
    lean.enable_lora(RANK, targets=LORA_TARGETS)
    assert_all_close(lean(x, padding_mask=padding_mask), before, atol=0)


def test_every_target_computes_its_merged_kernel():
    # The update beside the frozen kernel is the kernel with the update folded in:
    # keras-hub's block on the merged kernels computes the same.
    lean, reference = block_pair()
    lean.enable_lora(RANK, targets=LORA_TARGETS, alpha=2 * RANK)
    with_random_adapters(lean)
    for target, layer in reference_sublayers(reference).items():
        layer.kernel.assign(merged_kernel(lean, target))
    x, padding_mask = inputs()
    assert_all_close(lean(x, padding_mask=padding_mask), reference(x, padding_mask=padding_mask), atol=1e-5)
    assert_all_close(lean(x, padding_mask=padding_mask, training=True),
                     reference(x, padding_mask=padding_mask, training=True), atol=1e-5)


def test_feed_forward_adapters_learn_as_keras_lora_does():
    # Keras' own LoRA (`Dense.enable_lora`) on the same weights: the same outputs and adapter gradients.
    lean, reference = block_pair()
    targets = ("intermediate", "output")
    lean.enable_lora(RANK, targets=targets)
    with_random_adapters(lean)
    layers = reference_sublayers(reference)
    for target in targets:
        layers[target].enable_lora(RANK)
        a, b = lean.lora_adapters[target]
        layers[target].lora_kernel_a.assign(a)
        layers[target].lora_kernel_b.assign(b)
    x, padding_mask = inputs()
    weights = keras.ops.cos(keras.ops.arange(HIDDEN, dtype="float32"))

    def gradients(block, variables):
        return gradient_function(
            lambda: keras.ops.sum(block(x, padding_mask=padding_mask, training=True) * weights), variables)()

    ours = gradients(lean, [v for t in targets for v in lean.lora_adapters[t]])
    keras_lora = gradients(reference, [v for t in targets for v in (layers[t].lora_kernel_a, layers[t].lora_kernel_b)])
    for got, expected in zip(ours, keras_lora):
        assert np.abs(numpy(expected)).max() > 0
        assert_all_close(got, expected, atol=1e-4)


def test_only_the_adapters_train():
    lean, _ = block_pair()
    lean.enable_lora(RANK)
    assert [v.path.split("/", 1)[1] for v in lean.trainable_variables] == [
        "query_lora_a", "query_lora_b", "value_lora_a", "value_lora_b"]
    assert [tuple(v.shape) for v in lean.trainable_variables] == [(HIDDEN, RANK), (RANK, HIDDEN)] * 2
    # A frozen kernel gets no gradient; the adapters of a step do.
    x, padding_mask = inputs()
    kernel = lean.self_attention_layer.query_dense.kernel
    assert not kernel.trainable
    with_random_adapters(lean)
    run_layer_test(lean, {"x": x, "padding_mask": padding_mask},
                   call=lambda layer, given: layer(given["x"], padding_mask=given["padding_mask"]))


def test_the_config_builds_the_adapters():
    lean, _ = block_pair()
    lean.enable_lora(RANK, targets=["value", "query", "output"], alpha=6)
    config = lean.get_config()
    assert config["lora"] == {"rank": RANK, "alpha": 6, "targets": ["query", "value", "output"]}
    again = TransformerBlock.from_config(config)
    again.build((2, 7, HIDDEN))
    assert [v.path.split("/", 1)[1] for v in again.trainable_variables] == [
        v.path.split("/", 1)[1] for v in lean.trainable_variables]
    with pytest.raises(ValueError, match="has LoRA adapters already"):
        lean.enable_lora(RANK)


@pytest.mark.parametrize("settings, message", [
    ({"rank": 0}, "`lora_rank` must be a positive integer, got 0"),
    ({"rank": 2.5}, "`lora_rank` must be a positive integer"),
    ({"rank": 4, "targets": ["query", "keys"]}, "`lora_targets` must name some of"),
    ({"rank": 4, "targets": []}, "`lora_targets` must name some of"),
    ({"rank": 4, "alpha": -1}, "`lora_alpha` must be a number above 0"),
])
def test_settings_out_of_range_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        checked_lora_settings(**settings)
