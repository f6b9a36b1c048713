"""`compile(jit_compile=True)` on PyTorch: each Transformer block as one `torch.compile`d program."""

import keras
import numpy as np
import pytest

import kbert
from kbert.backend.portable import transformer_block as portable_block
from tests.test_case import ARCHITECTURES, BACKEND, numpy, tiny_encoder_kwargs

pytestmark = [
    pytest.mark.all_backends,
    pytest.mark.skipif(BACKEND != "torch", reason="only PyTorch compiles blocks apart from the step"),
]


def _blocks(model):
    from kbert.backend.torch import _layers_within

    return [layer for layer in _layers_within(model) if hasattr(layer, "compiled_with_torch")]


def _padded_inputs(hidden_dim, seed=0):
    import torch

    rng = np.random.default_rng(seed)
    inputs = torch.tensor(rng.normal(size=(2, 6, hidden_dim)).astype("float32"), requires_grad=True)
    return inputs, torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6])


@pytest.mark.parametrize("architecture", ARCHITECTURES)  # exact GELU; ALBERT's tanh GELU
def test_the_block_in_plain_pytorch_computes_what_the_keras_block_does(architecture):
    import torch

    from kbert.backend.torch import _block_math_arguments, block_math, dot_product_attention

    encoder = kbert.Encoder(**tiny_encoder_kwargs(architecture=architecture))
    block = _blocks(encoder)[0]
    inputs, padding_mask = _padded_inputs(encoder.hidden_dim)
    kernel = block.feedforward_intermediate_dense.kernel.value
    expected = portable_block(block, inputs, padding_mask, False, False, dot_product_attention)
    computed = block_math(*_block_math_arguments(block, inputs, padding_mask, training=False))
    np.testing.assert_allclose(numpy(computed), numpy(expected), atol=1e-5)
    for a, b in zip(torch.autograd.grad((expected**2).sum(), [inputs, kernel]),
                    torch.autograd.grad((computed**2).sum(), [inputs, kernel])):
        np.testing.assert_allclose(numpy(b), numpy(a), rtol=1e-4, atol=1e-5)


def test_a_seeded_dropout_layer_keeps_the_block_on_the_keras_path():
    from kbert.backend.torch import _block_math_arguments

    block = _blocks(kbert.Encoder(**tiny_encoder_kwargs()))[0]
    inputs, padding_mask = _padded_inputs(16)
    assert _block_math_arguments(block, inputs, padding_mask, training=True) is not None
    block.feedforward_dropout.seed = 7  # its masks follow its own seeds: only Keras' dropout draws them
    assert _block_math_arguments(block, inputs, padding_mask, training=True) is None
    assert _block_math_arguments(block, inputs, padding_mask, training=False) is not None


def _trained_losses(jit_compile, dropout):
    rng = np.random.default_rng(0)
    token_ids = {"token_ids": rng.integers(5, 27, (16, 8)).astype("int32"),
                 "segment_ids": np.zeros((16, 8), "int32"),
                 "padding_mask": (np.arange(8)[None, :] < rng.integers(3, 9, (16, 1))).astype("int32")}
    labels = rng.integers(0, 2, 16)
    keras.utils.set_random_seed(0)
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=dropout)
    model = kbert.Classifier(encoder, num_classes=2, dropout=dropout)
    model.compile(learning_rate=1e-3, jit_compile=jit_compile)
    history = model.fit(token_ids, labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model, history.history["loss"]


def test_jit_compile_trains_through_one_compiled_program_as_the_eager_blocks_do():
    import torch

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model, compiled = _trained_losses(jit_compile=True, dropout=0.0)
    # Keras' own whole-step compile is off; every block runs the one program.
    assert not model.jit_compile
    blocks = _blocks(model)
    assert len(blocks) == 2 and all(block.compiled_with_torch for block in blocks)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    _, eager = _trained_losses(jit_compile=False, dropout=0.0)
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
