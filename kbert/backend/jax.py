"""kbert's fast paths on the JAX backend: attention through `jax.nn.dot_product_attention`."""

import functools

import jax
import jax.numpy as jnp
import keras

from kbert.backend import portable
from kbert.backend.portable import (  # noqa: F401 (the seam's)
    build_before_first_step,
    compile_transformer_blocks,
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
    attention kernel runs, padding given as each row's length. A length
    says only "the first n tokens": where a batch's padding mask is not
    every row's tokens followed by its padding (kbert's preprocessors pack
    them so, a user's masks need not), XLA's kernel runs on that batch with
    the mask itself (`attend_by_lengths`). Elsewhere, and for the attention
    masks of packed rows, XLA's attention runs with the mask. Neither drops
    out attention probabilities (JAX has no public kernel that does), so a
    training step with attention dropout computes attention explicitly
    (`portable.explicit_attention`).
    """
    if training and dropout.rate > 0:
        return None
    if _cudnn_applies(query) and (padding_mask is None or len(padding_mask.shape) == 2):
        return attend_by_lengths(query, key, value, padding_mask, _cudnn_attention)
    mask = None if padding_mask is None else portable.over_scores(padding_mask.astype("bool"))
    return jax.nn.dot_product_attention(query, key, value, mask=mask)


def attend_by_lengths(query, key, value, padding_mask, by_lengths):
    """`by_lengths(query, key, value, lengths)` where each row's padding follows all its tokens; else the mask.

    The choice is made on the device, per batch (`jax.lax.cond`): no
    transfer to the host, and a mask that a length cannot say is never
    attended as if it could.
    """
    if padding_mask is None:
        return by_lengths(query, key, value, None)
    mask = padding_mask.astype("int32")
    lengths = jnp.sum(mask, axis=-1).astype("int32")
    trailing = jnp.all(mask == (jnp.arange(mask.shape[-1])[None, :] < lengths[:, None]))
    return jax.lax.cond(
        trailing,
        lambda: by_lengths(query, key, value, lengths),
        lambda: jax.nn.dot_product_attention(query, key, value, mask=mask.astype("bool")[:, None, None, :]),
    )


def _cudnn_attention(query, key, value, lengths):
    return jax.nn.dot_product_attention(query, key, value, key_value_seq_lengths=lengths, implementation="cudnn")


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
    """`f(*args)`: the gradients of `loss(*args)` with respect to `variables` (`jax.grad`, compiled).

    Compiled once per shape of `args` (arrays, or structures of them): run
    op by op, a gradient of a whole model takes minutes where compiled it
    takes seconds. Other variables that `loss` reads are constants.
    """

    def loss_of(values, args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return loss(*args)

    compiled = jax.jit(jax.grad(loss_of))

    def gradients(*args):
        args = keras.tree.map_structure(lambda value: None if value is None else jax.numpy.asarray(value), args)
        return compiled([variable.value for variable in variables], args)

    return gradients


AdamW = keras.optimizers.AdamW
