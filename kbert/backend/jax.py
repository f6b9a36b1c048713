"""kbert's fast paths on the JAX backend: attention through `jax.nn.dot_product_attention`."""

import functools

import jax
import jax.numpy as jnp
import keras

from kbert.backend import portable
from kbert.backend.portable import (  # noqa: F401 (the seam's)
    build_before_first_step,
    random_state,
    restore_random_state,
)

# XLA compiles the step for each batch shape: batches are padded to few widths.
COMPILES_EACH_SHAPE = True

# cuDNN's fused attention takes half-precision inputs and heads of up to 128
# values, a multiple of 8 (cuDNN's frontend documents the limits).
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128


def dot_product_attention(query, key, value, padding_mask, dropout, training):
    """Attention on `(batch, sequence, heads, head_dim)` tensors; None where it must be explicit.

    On a GPU, with bfloat16 or float16 inputs, cuDNN's fused (flash)
    attention kernel runs, padding given as each row's length: kbert packs
    every sequence's tokens first and its padding after them. Elsewhere
    XLA's attention runs, with the padding mask. Neither drops out
    attention probabilities, so a training step with attention dropout
    computes attention explicitly (`portable.explicit_attention`).
    """
    if training and dropout.rate > 0:
        return None
    if _cudnn_applies(query):
        lengths = None
        if padding_mask is not None:
            lengths = jnp.sum(padding_mask.astype("int32"), axis=-1).astype("int32")
        return jax.nn.dot_product_attention(
            query, key, value, key_value_seq_lengths=lengths, implementation="cudnn"
        )
    mask = None if padding_mask is None else padding_mask.astype("bool")[:, None, None, :]
    return jax.nn.dot_product_attention(query, key, value, mask=mask)


def _cudnn_applies(query):
    head_dim = query.shape[-1]
    return (
        _on_gpu()
        and keras.backend.standardize_dtype(query.dtype) in CUDNN_DTYPES
        and head_dim <= CUDNN_MAX_HEAD_DIM
        and head_dim % 8 == 0
    )


@functools.cache
def _on_gpu():
    return jax.default_backend() == "gpu"



def transformer_block(block, inputs, padding_mask=None, training=None, return_attention_scores=False):
    """BERT's Transformer block in `keras.ops`, attention through JAX's kernel (see the module)."""
    return portable.transformer_block(
        block, inputs, padding_mask, training, return_attention_scores, dot_product_attention
    )


def gradient_function(loss, variables):
    """`f(*args)`: the gradients of `loss(*args)` with respect to `variables` (`jax.grad`)."""

    def gradients(*args):
        def loss_of(values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loss(*args)

        return jax.grad(loss_of)([variable.value for variable in variables])

    return gradients


AdamW = keras.optimizers.AdamW
