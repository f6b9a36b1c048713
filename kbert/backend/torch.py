"""kbert's fast paths on the PyTorch backend: attention through `scaled_dot_product_attention`."""

import base64

import keras
import torch

from kbert.backend import portable
from kbert.backend.portable import build_before_first_step  # noqa: F401 (the seam's)

# PyTorch runs eagerly: a batch of any width costs no compilation.
COMPILES_EACH_SHAPE = False


def dot_product_attention(query, key, value, padding_mask, dropout, training):
    """Attention on `(batch, sequence, heads, head_dim)` tensors with PyTorch's fused kernel; None where it must be explicit.

    `scaled_dot_product_attention` picks a flash, memory-efficient or cuDNN
    kernel where one fits (the padding mask rules out the flash kernel), and
    any padding mask is applied as it is. In training it drops out attention
    probabilities itself (`dropout_p`), drawing from PyTorch's global
    generator: where Keras' own dropout would draw from it too (a `Dropout`
    layer without a seed of its own and without `noise_shape`, as in
    keras-hub's attention). The masks then come from `keras.utils.
    set_random_seed`, and kbert's backups keep that generator's state
    (`random_state`), so a resumed run draws what an uninterrupted one
    would; the outputs are distributed as the explicit path's, not equal to
    them draw by draw. A seeded layer's dropout follows its own seeds on the
    explicit path (`portable.explicit_attention`).
    """
    rate = float(dropout.rate) if training else 0.0
    if rate > 0 and not _drops_out_with_the_global_generator(dropout):
        return None
    mask = None if padding_mask is None else padding_mask.bool()[:, None, None, :]
    context = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=mask, dropout_p=rate
    )
    return context.transpose(1, 2)


def _drops_out_with_the_global_generator(dropout):
    # Keras' `Dropout` on PyTorch: unseeded and without a noise shape, it
    # calls `torch.nn.functional.dropout`, which draws from the global
    # generator; otherwise a generator seeded from the layer's own seeds.
    return dropout.seed is None and dropout.noise_shape is None


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


def random_state():
    """PyTorch's generators' states, as base64 text: the CPU's, then each GPU's.

    Keras' dropout on PyTorch draws from PyTorch's global generator (a layer
    without a seed of its own), which `keras.utils.set_random_seed` seeds but
    no model variable holds: a backup keeps it, so that a resumed run draws
    the masks of an uninterrupted one.
    """
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_available():
        states += torch.cuda.get_rng_state_all()
    return [base64.b64encode(state.numpy().tobytes()).decode("ascii") for state in states]


def restore_random_state(state):
    """Puts back what `random_state` gave; a state of another machine's GPUs leaves theirs as they are."""
    if not state:
        return
    tensors = [torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8) for text in state]
    torch.random.set_rng_state(tensors[0])
    if torch.cuda.is_available() and len(tensors) - 1 == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(tensors[1:])


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
