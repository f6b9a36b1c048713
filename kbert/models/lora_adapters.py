"""LoRA adapters of a Transformer block's projections: which they are, their update and its merge into the kernel.

LoRA (Hu et al., 2021) leaves a projection's kernel `W` frozen and learns
a low-rank update, two small matrices `A` (`input x rank`) and `B` (`rank x
output`): the projection computes `x @ W + (alpha / rank) * (x @ A) @ B`.
The update is computed beside `x @ W`, never folded into the kernel at each
step: folded, the backward pass would compute the whole kernel's gradient
again, and nothing would be saved. `B` starts at zero, so a model with fresh
adapters computes what the model without them does.

Keras' own `Dense.enable_lora` folds the update into its saved kernel and
zeroes the adapters when it loads one: a run resumed from its backup would
then learn nothing (both adapters zero, so both gradients are), and no
adapter could be saved apart. kbert's block never calls its `Dense` layers
(each backend's fast path reads their variables), so it holds the adapters
itself, saved as they are; `merged_kernel` folds them in for export.
Tested: every target computes what keras-hub's block computes on the merged
kernels, and the feed-forward adapters learn as Keras' own `Dense` LoRA
does on the same weights (outputs and gradients).

`EncoderLora`, a mixin of `kbert.Encoder`, gives every block of an encoder
adapters and freezes the rest but the pooler; `KeepsLoraFrozen` keeps it so
when Keras sets a model's layers trainable.
"""

import math

import keras
from keras import ops

# The projections of a block that take an adapter, each named by its role:
# the attention's query, key, value and output projections, and the
# feed-forward layer's two.
LORA_TARGETS = ("query", "key", "value", "attention_output", "intermediate", "output")
# The LoRA paper's choice for BERT-sized models, and keras-hub's.
DEFAULT_LORA_TARGETS = ("query", "value")


def target_layer(block, target):
    """The sublayer of `block` (a built `TransformerBlock`) whose kernel the adapter `target` updates."""
    attention = block.self_attention_layer
    return {
        "query": attention.query_dense,
        "key": attention.key_dense,
        "value": attention.value_dense,
        "attention_output": attention.output_dense,
        "intermediate": block.feedforward_intermediate_dense,
        "output": block.feedforward_output_dense,
    }[target]


def kernel_sizes(kernel, target):
    """`(input width, output width)` of a projection's kernel (the attention's are 3-D: heads split out)."""
    shape = tuple(kernel.shape)
    if target == "attention_output":  # (heads, head_dim, hidden)
        return shape[0] * shape[1], shape[2]
    return shape[0], math.prod(shape[1:])


def checked_lora_settings(rank, targets=None, alpha=None):
    """`{"rank", "alpha", "targets"}`, checked: a ValueError names the first setting out of range.

    `targets` is a list of `LORA_TARGETS`, or "all" for every one of them;
    default `DEFAULT_LORA_TARGETS`.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"`lora_rank` must be a positive integer, got {rank!r}.")
    targets = DEFAULT_LORA_TARGETS if targets is None else targets
    targets = LORA_TARGETS if targets == "all" else [targets] if isinstance(targets, str) else list(targets)
    unknown = [name for name in targets if name not in LORA_TARGETS]
    if unknown or not targets:
        raise ValueError(f"`lora_targets` must name some of {list(LORA_TARGETS)}, got {targets!r}.")
    targets = [name for name in LORA_TARGETS if name in targets]  # one order, whatever order given
    alpha = rank if alpha is None else alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"`lora_alpha` must be a number above 0, got {alpha!r}.")
    return {"rank": rank, "alpha": alpha, "targets": targets}


class KeepsLoraFrozen:
    """Mixin of the layers that hold LoRA adapters (block, encoder): `trainable = True` leaves the frozen frozen.

    Keras' `Layer.trainable` setter sets every variable of the layer and its
    sublayers, and Keras sets it on each layer of a functional model it
    builds (`trainable=True` in a model's config, as every loaded file
    has): a task model built on a LoRA encoder, or loaded from a file, would
    train the whole encoder again. Here the variables LoRA froze are frozen
    again after any `trainable = True` (`trainable = False` freezes all, as
    in Keras). Subclasses give `lora_trained_variables()`.
    """

    @property
    def trainable(self):
        return super().trainable

    @trainable.setter
    def trainable(self, value):
        super(KeepsLoraFrozen, type(self)).trainable.fset(self, value)
        if value and getattr(self, "lora", None) is not None:
            self.freeze_for_lora()

    def freeze_for_lora(self):
        """Makes `lora_trained_variables()` the layer's only trainable variables."""
        trained = {id(variable) for variable in self.lora_trained_variables()}
        for variable in self.weights:
            variable.trainable = id(variable) in trained


def add_adapters(block, settings):
    """Gives the built `block` an adapter per target (`A` He-uniform, `B` zeros) and freezes its other variables.

    The adapters are the block's own variables, attributes
    `{target}_lora_a` and `{target}_lora_b` (as Keras' `Dense` holds its
    `lora_kernel_a` and `lora_kernel_b`), in float32, the block's variable
    dtype.
    """
    # A built layer's tracker refuses new variables: Keras' own
    # `Dense.enable_lora` opens it the same way.
    tracker = getattr(block, "_tracker", None)
    if tracker is not None:
        tracker.unlock()
    for target in settings["targets"]:
        inputs, outputs = kernel_sizes(target_layer(block, target).kernel, target)
        setattr(block, f"{target}_lora_a", block.add_weight(
            name=f"{target}_lora_a", shape=(inputs, settings["rank"]), initializer=keras.initializers.HeUniform()))
        setattr(block, f"{target}_lora_b", block.add_weight(
            name=f"{target}_lora_b", shape=(settings["rank"], outputs), initializer="zeros"))
    if tracker is not None and block.built:
        tracker.lock()
    block.freeze_for_lora()


def adapters_of(block):
    """`{target: (A, B)}`: the LoRA adapters of `block`, none where it has none (or is not built)."""
    if block.lora is None:
        return {}
    return {target: (getattr(block, f"{target}_lora_a"), getattr(block, f"{target}_lora_b"))
            for target in block.lora["targets"] if hasattr(block, f"{target}_lora_a")}


def merged_kernel(block, target):
    """The kernel of `target`'s projection with its adapter folded in (`W + (alpha / rank) * A @ B`), as NumPy."""
    kernel = target_layer(block, target).kernel
    a, b = adapters_of(block)[target]
    delta = (block.lora["alpha"] / block.lora["rank"]) * ops.matmul(a, b)
    return keras.ops.convert_to_numpy(kernel + ops.reshape(ops.cast(delta, kernel.dtype), kernel.shape))


class EncoderLora(KeepsLoraFrozen):
    """Mixin of `kbert.Encoder`: LoRA adapters on every Transformer block (`enable_lora`), and their merge."""

    lora = None

    def enable_lora(self, rank, targets=None, alpha=None):
        """Freezes the encoder but its pooler, and gives every Transformer block LoRA adapters (Hu et al., 2021).

        Each block's `targets` projections compute `x @ W + (alpha / rank) *
        (x @ A) @ B`, with `W` frozen and `A` (`input x rank`) and `B`
        (`rank x output`, zeros at first) trained, on each backend's fast
        path: no gradient is computed for a frozen kernel, and the optimizer
        keeps state for the adapters alone. Embeddings, biases and
        LayerNorms are frozen; the pooler, the first layer of BERT's
        classification head, still trains (its task model's head with it).
        The setting is part of the config, so a `.keras` file comes back with
        its adapters as they were; `kbert.export` folds them into the
        kernels. See `kbert.models.lora_adapters`.

        Args:
            rank: the adapters' rank (8 is the LoRA paper's choice for
                BERT-sized models).
            targets: the projections with adapters, of "query", "key",
                "value", "attention_output", "intermediate" and "output",
                or "all" of them; default query and value.
            alpha: the update's scale is `alpha / rank`; default `rank`.

        Example:
        >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=50, num_layers=2)
        >>> encoder.enable_lora(4)
        >>> sorted({v.path.split("/")[-1] for v in encoder.trainable_variables})
        ['bias', 'kernel', 'query_lora_a', 'query_lora_b', 'value_lora_a', 'value_lora_b']
        """
        if self.lora is not None:
            raise ValueError(f"This encoder has LoRA adapters already (rank {self.lora['rank']}).")
        if self.num_groups != self.num_layers or self.num_inner_repetitions != 1:
            raise ValueError("LoRA adapters are for encoders whose layers have their own blocks (BERT), not for "
                             "an ALBERT whose layers share them.")
        settings = checked_lora_settings(rank, targets, alpha)
        for block in self.transformer_layers:
            block.enable_lora(**settings)
        self.lora = settings
        self.freeze_for_lora()

    def lora_trained_variables(self):
        """What trains with LoRA enabled: the adapters and the pooler."""
        return self.lora_adapters + list(self.pooler_dense.weights)

    @property
    def lora_adapters(self):
        """The LoRA adapter variables of every block, in order; empty without LoRA."""
        return [variable for block in self.transformer_layers
                for pair in block.lora_adapters.values() for variable in pair]

    def merged_lora(self):
        """A new encoder without LoRA adapters, each folded into its kernel (`W + (alpha / rank) * A @ B`)."""
        config = self.get_config()
        del config["lora"]
        merged = type(self).from_config(config)
        kernels = {id(target_layer(block, target).kernel): merged_kernel(block, target)
                   for block in self.transformer_layers for target in block.lora["targets"]}
        adapters = {id(variable) for variable in self.lora_adapters}
        # The variables of the encoder without adapters come in the same order as the merged encoder's.
        merged.set_weights([kernels[id(v)] if id(v) in kernels else keras.ops.convert_to_numpy(v)
                            for v in self.weights if id(v) not in adapters])
        return merged
