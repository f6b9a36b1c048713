"""kbert's fast paths on the PyTorch backend: attention through `scaled_dot_product_attention`."""

import keras
import torch

from kbert.backend import portable


def dot_product_attention(query, key, value, padding_mask, dropout, training):
    """Attention on `(batch, sequence, heads, head_dim)` tensors with PyTorch's fused kernel.

    `scaled_dot_product_attention` picks a flash, memory-efficient or cuDNN
    kernel where one fits (the padding mask rules out the flash kernel), and
    drops out attention probabilities itself in training, with PyTorch's
    generator (which `keras.utils.set_random_seed` seeds).
    """
    mask = None if padding_mask is None else padding_mask.bool()[:, None, None, :]
    rate = dropout.rate if training else 0.0
    context = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=mask, dropout_p=rate
    )
    return context.transpose(1, 2)


def transformer_block(block, inputs, padding_mask=None, training=None, return_attention_scores=False):
    """BERT's Transformer block in `keras.ops`, attention through PyTorch's kernel (see the module)."""
    return portable.transformer_block(
        block, inputs, padding_mask, training, return_attention_scores, dot_product_attention
    )


def gradient_function(loss, variables):
    """`f(*args)`: the gradients of `loss(*args)` with respect to `variables` (`torch.autograd`)."""

    def gradients(*args):
        values = [variable.value for variable in variables]
        return list(torch.autograd.grad(loss(*args), values, allow_unused=True))

    return gradients


def _adamw():
    # keras' own AdamW on this backend updates all weights with a few
    # multi-tensor (`torch._foreach_*`) kernels; keras gives it only to
    # `keras.optimizers.AdamW` itself, not to subclasses such as BertAdamW.
    try:
        from keras.src.backend.torch.optimizers.torch_adamw import AdamW
    except ImportError:  # a keras without it: the per-variable update
        return keras.optimizers.AdamW
    return AdamW


AdamW = _adamw()
