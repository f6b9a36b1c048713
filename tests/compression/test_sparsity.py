import keras
import numpy as np
import pytest

import kbert
from kbert.compression.sparsity import KERNEL_NAMES, prunable_kernels
from tests.test_case import numpy, tiny_classifier, tiny_encoder_kwargs

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def zero_some(model, fractions):
    """Sets the first `fractions[kernel name]` of every such kernel's weights to 0; returns the counts."""
    zeroed = {}
    for block, name, kernel in prunable_kernels(model.encoder):
        value = numpy(kernel).ravel()
        count = int(fractions.get(name, 0.0) * value.size)
        value[:count] = 0
        kernel.assign(value.reshape(kernel.shape))
        zeroed[block, name] = count
    return zeroed


def test_a_fresh_encoder_has_no_sparsity_and_counts_every_weight():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    report = kbert.compression.sparsity(encoder)
    hidden, intermediate = 16, 32
    per_block = 4 * hidden * hidden + 2 * hidden * intermediate
    assert report["sparsity"] == 0.0
    assert report["total"] == report["nonzero"] == 2 * per_block
    assert list(report["blocks"]) == ["transformer_layer_0", "transformer_layer_1"]
    for block in report["blocks"].values():
        assert block["total"] == per_block and list(block["kernels"]) == list(KERNEL_NAMES)
        assert block["kernels"]["intermediate"]["total"] == hidden * intermediate
    assert report["encoder_parameters"] == encoder.count_params()
    # Biases and LayerNorm betas start at 0.
    zeros = sum(int(np.sum(numpy(weight) == 0)) for weight in encoder.weights)
    assert report["encoder_nonzero"] == encoder.count_params() - zeros


def test_blocks_and_kernels_of_a_task_model_are_counted(tmp_path):
    model = tiny_classifier(sequence_length=8)
    zeroed = zero_some(model, {"query": 0.5, "intermediate": 0.25, "output": 0.75})
    report = kbert.compression.sparsity(model)
    for (block, name), count in zeroed.items():
        entry = report["blocks"][block]["kernels"][name]
        assert entry["total"] - entry["nonzero"] == count
        assert entry["sparsity"] == pytest.approx(count / entry["total"])
    block = report["blocks"]["transformer_layer_1"]
    assert block["total"] - block["nonzero"] == sum(c for (b, _), c in zeroed.items() if b == "transformer_layer_1")
    assert report["total"] - report["nonzero"] == sum(zeroed.values())
    assert report["encoder_parameters"] - report["encoder_nonzero"] >= sum(zeroed.values())

    # A model loaded from `.keras` reports the same.
    path = str(tmp_path / "model.keras")
    model.save(path)
    assert kbert.compression.sparsity(keras.saving.load_model(path)) == report

    table = kbert.compression.format_sparsity(report)
    assert "transformer_layer_1" in table and "  intermediate" in table
    assert f"{report['total']:,}" in table and f"{100 * report['sparsity']:.1f} %" in table


def test_shared_albert_blocks_count_once():
    model = tiny_classifier(sequence_length=8, architecture="albert")
    report = kbert.compression.sparsity(model)
    assert list(report["blocks"]) == ["transformer_group_0_layer_0"]
    # The embedding projection is not a prunable kernel.
    assert report["total"] == 4 * 16 * 16 + 2 * 16 * 32


def test_a_model_without_an_encoder_is_refused():
    inputs = keras.Input((3,))
    with pytest.raises(TypeError, match="got Functional, which has none"):
        kbert.compression.sparsity(keras.Model(inputs, keras.layers.Dense(1)(inputs)))
