"""kbert's fast paths on the PyTorch backend: attention through `scaled_dot_product_attention`, blocks through `torch.compile`."""

import base64
import functools

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
    mask = None if padding_mask is None else portable.over_scores(padding_mask.bool())
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
    """BERT's Transformer block in `keras.ops`, attention through PyTorch's kernel (see the module).

    A block marked by `compile_transformer_blocks` runs as one
    `torch.compile`d program of `block_math` instead, where it can.
    """
    if getattr(block, "compiled_with_torch", False) and not return_attention_scores:
        arguments = _block_math_arguments(block, inputs, padding_mask, training)
        if arguments is not None:
            return _compiled_block_math()(*arguments)
    return portable.transformer_block(
        block, inputs, padding_mask, training, return_attention_scores, dot_product_attention
    )


def compile_transformer_blocks(model):
    """Marks `model`'s Transformer blocks to run through one `torch.compile`d program; returns True.

    Keras' own `jit_compile=True` on PyTorch compiles the whole training
    step, Keras' Python included, which had not finished for BERT-base
    after 150 s on a GPU. A block is a small, pure computation: it compiles
    once (tens of seconds), and every block of the encoder (the same shapes)
    reuses the program. Embeddings, head, loss and optimizer stay eager.
    """
    for layer in _layers_within(model):
        if hasattr(layer, "compiled_with_torch"):  # kbert's Transformer blocks
            layer.compiled_with_torch = True
    return True


def _layers_within(model):
    for layer in getattr(model, "layers", ()):
        yield layer
        yield from _layers_within(layer)


# The activations the compiled block computes, by name: keras' exact GELU
# and kbert's tanh approximation (`kbert.models.encoder.gelu_approximate`).
GELU_APPROXIMATIONS = {"gelu": "none", "gelu_approximate": "tanh"}


def _block_math_arguments(block, inputs, padding_mask, training):
    """`block_math`'s arguments for this call; None where it does not compute what the block does.

    Dropout must draw from PyTorch's global generator (as unseeded Keras
    `Dropout` layers do), the activation must be a GELU, LayerNorms plain
    (kbert's block is post-LayerNorm), and the block without LoRA adapters.
    """
    if block.lora_adapters:  # LoRA adapters: the portable block adds their updates
        return None
    attention = block.self_attention_layer
    dropouts = (block.attention_probabilities_dropout, block.self_attention_dropout, block.feedforward_dropout)
    if training and any(d.rate > 0 and not _drops_out_with_the_global_generator(d) for d in dropouts):
        return None
    approximate = GELU_APPROXIMATIONS.get(getattr(block.activation, "__name__", None))
    norms = (block.self_attention_layer_norm, block.feedforward_layer_norm)
    if approximate is None or any(n.rms_scaling or n.gamma is None or n.beta is None for n in norms):
        return None
    layers = (attention.query_dense, attention.key_dense, attention.value_dense, attention.output_dense,
              block.feedforward_intermediate_dense, block.feedforward_output_dense)
    weights = [value for layer in layers for value in (layer.kernel.value, layer.bias.value)]
    weights += [value for norm in norms for value in (norm.gamma.value, norm.beta.value)]
    settings = (tuple(float(d.rate) if training else 0.0 for d in dropouts),
                tuple(float(n.epsilon) for n in norms), approximate)
    return inputs, padding_mask, weights, settings


def block_math(inputs, padding_mask, weights, settings):
    """BERT's post-LayerNorm Transformer block in plain PyTorch: what `portable.transformer_block` computes.

    `weights` are the query, key, value, output, intermediate and output
    dense layers' kernels and biases (as Keras holds them), then the two
    LayerNorms' gamma and beta; `settings` is `((attention, attention output
    and feed-forward dropout rates), (the LayerNorms' epsilons), GELU
    approximation)`. Matmuls run in the inputs' dtype (bfloat16 under mixed
    precision), LayerNorm in float32.
    """
    (query_kernel, query_bias, key_kernel, key_bias, value_kernel, value_bias, output_kernel, output_bias,
     intermediate_kernel, intermediate_bias, feedforward_kernel, feedforward_bias,
     attention_gamma, attention_beta, feedforward_gamma, feedforward_beta) = weights
    (attention_rate, attention_output_rate, feedforward_rate), (attention_epsilon, feedforward_epsilon), \
        approximate = settings
    functional = torch.nn.functional
    dtype = inputs.dtype
    batch_size, length, hidden_dim = inputs.shape
    heads, head_dim = query_kernel.shape[1:]
    width = heads * head_dim

    kernel = torch.cat([k.reshape(hidden_dim, width) for k in (query_kernel, key_kernel, value_kernel)], 1)
    bias = torch.cat([b.reshape(width) for b in (query_bias, key_bias, value_bias)])
    qkv = torch.addmm(bias.to(dtype), inputs.reshape(-1, hidden_dim), kernel.to(dtype))
    query, key, value = qkv.view(batch_size, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    mask = None if padding_mask is None else portable.over_scores(padding_mask.bool())
    context = functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=attention_rate)
    context = context.transpose(1, 2).reshape(-1, width)
    attended = torch.addmm(output_bias.to(dtype), context, output_kernel.reshape(width, hidden_dim).to(dtype))
    attended = functional.dropout(attended, attention_output_rate, training=attention_output_rate > 0)
    x = _layer_norm(attended + inputs.reshape(-1, hidden_dim), attention_gamma, attention_beta, attention_epsilon)

    hidden = torch.addmm(intermediate_bias.to(dtype), x, intermediate_kernel.to(dtype))
    hidden = functional.gelu(hidden, approximate=approximate)
    hidden = torch.addmm(feedforward_bias.to(dtype), hidden, feedforward_kernel.to(dtype))
    hidden = functional.dropout(hidden, feedforward_rate, training=feedforward_rate > 0)
    x = _layer_norm(hidden + x, feedforward_gamma, feedforward_beta, feedforward_epsilon)
    return x.view(batch_size, length, hidden_dim)


def _layer_norm(x, gamma, beta, epsilon):
    normalized = torch.nn.functional.layer_norm(x.float(), x.shape[-1:], gamma.float(), beta.float(), epsilon)
    return normalized.to(x.dtype)


@functools.cache
def _compiled_block_math():
    # One program for every block: the weights are arguments, not captured.
    return torch.compile(block_math)


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
    if not hasattr(torch, "_fused_adamw_"):
        return AdamW

    class FusedAdamW(AdamW):
        """keras' AdamW, its update (weight decay included) in PyTorch's fused AdamW kernel.

        keras' multi-tensor update passes over every weight about ten times
        (decay, two moments, square root, division, ...), each pass a kernel
        per weight: on a CPU, for a small BERT, half of a fine-tuning step.
        PyTorch's fused kernel makes one pass. The formula is keras': its
        epsilon is added to the square root of the second moment before the
        bias correction, so PyTorch's (added after it) is keras' divided by
        `sqrt(1 - beta_2 ** step)`; keras decays weights before the update,
        as the kernel does.
        """

        def _fuses(self, variables):
            values = [variable.value for variable in variables]
            return (not self.amsgrad and values and len({(v.device, v.dtype) for v in values}) == 1
                    and values[0].dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16))

        def _clip_gradients(self, grads):
            # keras' global clipping, its norms in one multi-tensor kernel.
            present = [grad for grad in grads if grad is not None]
            if self.clipnorm or not self.global_clipnorm or not present:
                return super()._clip_gradients(grads)
            with torch.no_grad():
                norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(present)).float())
                limit = torch.tensor(1.0 / self.global_clipnorm, device=norm.device)
                # NaN where the norm is not finite, as keras' scale is.
                scale = self.global_clipnorm * torch.minimum(1.0 / norm, limit) + (norm - norm)
                scaled = iter(torch._foreach_mul(present, scale))
            return [None if grad is None else next(scaled) for grad in grads]

        def _apply_weight_decay(self, variables):
            if not self._fuses(variables):
                super()._apply_weight_decay(variables)
            # Else the fused update decays them.

        def _parallel_update_step(self, grads, variables, learning_rate):
            if not self._fuses(variables):
                return super()._parallel_update_step(grads, variables, learning_rate)
            with torch.no_grad():
                step = float(keras.ops.convert_to_numpy(self.iterations)) + 1
                learning_rate = float(keras.ops.convert_to_numpy(learning_rate))
                epsilon = self.epsilon / (1 - self.beta_2 ** step) ** 0.5
                steps = torch.full((), step, dtype=torch.float32, device=variables[0].value.device)
                decayed = [self.weight_decay is not None and self._use_weight_decay(v) for v in variables]
                for decays in (True, False):
                    chosen = [i for i, d in enumerate(decayed) if d == decays]
                    if not chosen:
                        continue
                    indices = [self._get_variable_index(variables[i]) for i in chosen]
                    torch._fused_adamw_(
                        [variables[i].value for i in chosen],
                        [grads[i].to(variables[i].value.dtype) for i in chosen],
                        [self._momentums[j].value for j in indices],
                        [self._velocities[j].value for j in indices],
                        [],  # no amsgrad
                        [steps] * len(chosen),
                        lr=learning_rate, beta1=self.beta_1, beta2=self.beta_2,
                        weight_decay=self.weight_decay if decays else 0.0, eps=epsilon,
                        amsgrad=False, maximize=False,
                    )

    return FusedAdamW


AdamW = _adamw()
