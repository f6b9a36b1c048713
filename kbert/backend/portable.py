"""BERT's Transformer block in `keras.ops`, for the backends whose compilers fuse it (JAX, PyTorch).

The same computation as keras-hub's `TransformerEncoder` (post-LayerNorm),
on the same variables, in fewer and larger ops: one matmul for the query, key and
value projections, heads split by a reshape, and attention handed to the
backend's fused kernel (`attend`) unless attention probabilities are wanted
or must be dropped out by a kernel that cannot.
"""

import math

import keras
from keras import ops

# keras' masked softmax uses the same: -1e9, or what float16 can hold.
LARGE_NEGATIVE = {"float16": -3e4}


def transformer_block(block, inputs, padding_mask, training, return_attention_scores, attend):
    """`block`'s output (and attention probabilities): see `kbert.backend.transformer_block`.

    `padding_mask` is `(batch, key)`, 1 on tokens, or an attention mask
    `(batch, query, key)`, 1 where a query may attend a key (packed rows:
    `kbert.preprocessing.packing`). `attend(query, key, value, padding_mask,
    dropout, training)` computes attention on `(batch, sequence, heads,
    head_dim)` tensors with the backend's kernel, where `dropout` is the attention's `keras.layers.Dropout`;
    it returns None where that kernel does not apply, and
    `explicit_attention` runs instead.
    """
    attention = block.self_attention_layer
    hidden_dim = inputs.shape[-1]
    heads, head_dim = attention.query_dense.kernel.shape[1:]
    width = heads * head_dim
    batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]

    # One matmul on the three kernels side by side: on an accelerator a
    # kernel launch costs more than joining the weights.
    projections = (attention.query_dense, attention.key_dense, attention.value_dense)
    kernel = ops.concatenate([ops.reshape(p.kernel, (hidden_dim, width)) for p in projections], axis=1)
    bias = ops.concatenate([ops.reshape(p.bias, (width,)) for p in projections], axis=0)
    qkv = ops.reshape(ops.matmul(inputs, kernel) + bias, (batch_size, length, 3, heads, head_dim))
    query, key, value = (
        with_lora_update(block, target, inputs, qkv[:, :, index], (batch_size, length, heads, head_dim))
        for index, target in enumerate(("query", "key", "value"))
    )

    dropout = block.attention_probabilities_dropout
    context = probabilities = None
    if not return_attention_scores:
        context = attend(query, key, value, padding_mask, dropout, training)
    if context is None:
        context, probabilities = explicit_attention(query, key, value, padding_mask, dropout, training)
    output = attention.output_dense
    context = ops.reshape(context, (batch_size, length, width))
    attended = ops.matmul(context, ops.reshape(output.kernel, (width, hidden_dim))) + output.bias
    attended = with_lora_update(block, "attention_output", context, attended)
    attended = block.self_attention_dropout(attended, training=training)
    x = block.self_attention_layer_norm(attended + inputs)

    intermediate = block.feedforward_intermediate_dense
    hidden = ops.matmul(x, intermediate.kernel) + intermediate.bias
    hidden = block.activation(with_lora_update(block, "intermediate", x, hidden))
    output = block.feedforward_output_dense
    hidden = with_lora_update(block, "output", hidden, ops.matmul(hidden, output.kernel) + output.bias)
    hidden = block.feedforward_dropout(hidden, training=training)
    x = block.feedforward_layer_norm(hidden + x)
    if return_attention_scores:
        return x, probabilities
    return x


def with_lora_update(block, target, x, projected, shape=None):
    """`projected` (the frozen kernel's matmul on `x`) plus `target`'s LoRA update, reshaped to `shape` if given."""
    update = lora_update(block, target, x)
    if update is None:
        return projected
    return projected + (update if shape is None else ops.reshape(update, shape))


def lora_update(block, target, x):
    """`(alpha / rank) * (x @ A) @ B`, the LoRA adapter `target` of `block` on `x` `(..., input width)`; or None.

    The result is `(..., output width)`, heads not split. The adapters and
    their settings are the block's (`kbert.models.lora_adapters`); each
    backend's block adds the update beside the frozen kernel's matmul, so
    that no gradient of the kernel itself is computed.
    """
    adapters = getattr(block, "lora_adapters", None) or {}
    if target not in adapters:
        return None
    a, b = adapters[target]
    scale = ops.cast(block.lora["alpha"] / block.lora["rank"], x.dtype)
    return ops.matmul(ops.matmul(x, ops.cast(a, x.dtype)), ops.cast(b, x.dtype)) * scale


def explicit_attention(query, key, value, padding_mask, dropout, training):
    """Attention as BERT writes it: `(context, probabilities)`, the probabilities `(batch, heads, query, key)`.

    Scores scaled by `1 / sqrt(head_dim)`, keys on padding blocked, softmax,
    `dropout` of the probabilities in training.
    """
    head_dim = query.shape[-1]
    query = ops.transpose(query, (0, 2, 1, 3))
    key = ops.transpose(key, (0, 2, 3, 1))
    value = ops.transpose(value, (0, 2, 1, 3))
    scores = ops.matmul(query, key) * ops.cast(1.0 / math.sqrt(head_dim), query.dtype)
    if padding_mask is not None:
        blocked = 1.0 - ops.cast(over_scores(padding_mask), scores.dtype)
        scores = scores + blocked * LARGE_NEGATIVE.get(keras.backend.standardize_dtype(scores.dtype), -1e9)
    probabilities = ops.softmax(scores, axis=-1)
    context = ops.matmul(dropout(probabilities, training=training), value)
    return ops.transpose(context, (0, 2, 1, 3)), probabilities


def over_scores(mask):
    """A padding mask `(batch, key)` or an attention mask `(batch, query, key)`, broadcast over `(batch, heads, query, key)`."""
    return mask[:, None, None, :] if len(mask.shape) == 2 else mask[:, None, :, :]


def random_state():
    """The backend's own random state outside Keras' seed generators: none (TensorFlow, JAX).

    Keras' `SeedGenerator`s, which drop out on these backends, are variables
    of the model, saved with its weights.
    """
    return None


def restore_random_state(state):
    """Puts back what `random_state` gave (nothing to do here)."""


def compile_transformer_blocks(model):
    """Compiles `model`'s Transformer blocks apart from its step: nothing to do here (TensorFlow, JAX); False.

    These backends compile the whole step (`jit_compile`), blocks included.
    """
    return False


def build_before_first_step(model, data=None):
    """Creates the state `fit` trains before its first step: nothing to do here (JAX, PyTorch).

    Keras on these backends builds the optimizer, metrics and losses before
    it compiles or runs the first step.
    """
