"""BERT's Transformer block: kbert's own layer, on keras-hub's variables, computed as few, large ops."""

import keras

from kbert.backend import transformer_block
from kbert.models.lora_adapters import KeepsLoraFrozen, adapters_of, add_adapters, checked_lora_settings

# The block's sublayers that hold weights. Keras names a layer's weights in a
# `.keras` file by the attribute that holds the layer; up to kbert 0.4 the
# block was keras-hub's `TransformerEncoder`, which holds the same layers
# under the same names with a leading underscore.
WEIGHTED_SUBLAYERS = ("self_attention_layer", "self_attention_layer_norm", "feedforward_layer_norm",
                      "feedforward_intermediate_dense", "feedforward_output_dense")
KERAS_HUB_BLOCK_ATTRIBUTES = {f"_{name}": name for name in WEIGHTED_SUBLAYERS}


@keras.saving.register_keras_serializable(package="kbert")
class TransformerBlock(KeepsLoraFrozen, keras.layers.Layer):
    """BERT's post-LayerNorm Transformer block, computed as fewer, larger ops on each backend.

    Self-attention (a `keras.layers.MultiHeadAttention`), dropout, a
    residual and LayerNorm; then a feed-forward layer (`intermediate_dim`
    wide, `activation`), dropout, a residual and LayerNorm (Vaswani et al.,
    2017, as BERT uses it).

    kbert owns the block, and the sublayers are public attributes, read by
    the backends' fast paths and by compression. Its variables are those of
    keras-hub's `TransformerEncoder` (names, shapes and order), so
    checkpoints convert one-to-one (`transformer_layer_0/self_attention_layer/
    query/kernel`, ...), and it computes what keras-hub's block computes
    with `normalize_first=False` (tested equal, outputs and gradients, on
    the same weights).

    `call` is `kbert.backend.transformer_block`, written for the backend
    Keras runs on. On TensorFlow it is a graph of 2-D ops that the grappler
    remapper fuses into oneDNN kernels (`MatMul + BiasAdd + GELU` as one);
    on JAX and PyTorch it is `keras.ops` code with one matmul for queries,
    keys and values and attention through the backend's fused kernel
    (cuDNN's on a JAX GPU, `scaled_dot_product_attention` on PyTorch).

    Its arguments are those of keras-hub's `TransformerEncoder` that BERT
    uses (more than ten), so that `.keras` files written when the block was
    keras-hub's load into it.

    Args:
        intermediate_dim: width of the feed-forward layer.
        num_heads: attention heads.
        head_dim: the size of each head; default `hidden_dim // num_heads`.
            A block whose heads were pruned (`kbert.prune_heads`) keeps
            fewer heads of the full block's size, so `num_heads * head_dim`
            may be less than `hidden_dim`.
        dropout: dropout of the attention output and of the feed-forward
            output.
        attention_dropout: dropout of the attention probabilities; default
            `dropout`. At 0, a training step attends through the backend's
            fused kernel too.
        activation: the feed-forward activation (BERT: "gelu").
        layer_norm_epsilon: the LayerNorms' epsilon (BERT: 1e-12).
        kernel_initializer, bias_initializer: of every dense layer.
        normalize_first: accepted for `.keras` files written when the block
            was keras-hub's; only False (BERT's post-LayerNorm) is computed.
        lora: LoRA adapters the block builds with, `{"rank", "alpha",
            "targets"}` (see `enable_lora`); default None.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:
    >>> block = TransformerBlock(intermediate_dim=32, num_heads=2)
    >>> x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    >>> tuple(block(x, padding_mask=np.array([[1, 1, 1, 0, 0], [1] * 5])).shape)
    (2, 5, 16)
    >>> tuple(block.self_attention_layer.query_dense.kernel.shape)
    (16, 2, 8)
    """

    # Set by `kbert.backend.compile_transformer_blocks` on PyTorch.
    compiled_with_torch = False

    def __init__(self, intermediate_dim, num_heads, head_dim=None, dropout=0.0, attention_dropout=None,
                 activation="relu", layer_norm_epsilon=1e-5, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", normalize_first=False, lora=None, **kwargs):
        super().__init__(**kwargs)
        if normalize_first:
            raise ValueError(
                "kbert's Transformer block is BERT's post-LayerNorm block: normalize_first=True (pre-LayerNorm) "
                "is not computed."
            )
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = False
        self.supports_masking = True
        self.lora = None if lora is None else checked_lora_settings(**lora)

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        head_dim = hidden_dim // self.num_heads if self.head_dim is None else self.head_dim
        if head_dim < 1:
            raise ValueError(f"hidden_dim {hidden_dim} is smaller than num_heads {self.num_heads}.")
        # Built in keras-hub's order, which orders the weights.
        self.self_attention_layer = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads, key_dim=head_dim, kernel_initializer=self._initializer("kernel"),
            bias_initializer=self._initializer("bias"), dtype=self.dtype_policy, name="self_attention_layer",
        )
        self.self_attention_layer.build(query_shape=inputs_shape, value_shape=inputs_shape)
        # The attention probabilities drop out here, as the backends' kernels
        # are told to: not inside `MultiHeadAttention`, which kbert never calls.
        self.attention_probabilities_dropout = keras.layers.Dropout(
            self.attention_dropout, dtype=self.dtype_policy, name="attention_probabilities_dropout"
        )
        self.self_attention_layer_norm = self._layer_norm("self_attention_layer_norm", inputs_shape)
        self.self_attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="self_attention_dropout"
        )
        self.feedforward_layer_norm = self._layer_norm("feedforward_layer_norm", inputs_shape)
        self.feedforward_intermediate_dense = self._dense(
            self.intermediate_dim, "feedforward_intermediate_dense", inputs_shape, activation=self.activation
        )
        self.feedforward_output_dense = self._dense(
            hidden_dim, "feedforward_output_dense", (*inputs_shape[:-1], self.intermediate_dim)
        )
        self.feedforward_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="feedforward_dropout"
        )
        if self.lora is not None:
            add_adapters(self, self.lora)
        self.built = True

    def enable_lora(self, rank, targets=None, alpha=None):
        """Adds LoRA adapters of `rank` to the `targets` projections and freezes every other variable of the block.

        The projections then compute `x @ W + (alpha / rank) * (x @ A) @ B`
        on each backend's fast path, `W` frozen (no gradient is computed for
        it); see `kbert.models.lora_adapters`.

        Args:
            rank: the adapters' rank.
            targets: the projections that get one, of "query", "key",
                "value", "attention_output", "intermediate" and "output";
                default query and value.
            alpha: the update's scale is `alpha / rank`; default `rank`.
        """
        if self.lora is not None:
            raise ValueError(f"{self.name} has LoRA adapters already (rank {self.lora['rank']}).")
        self.lora = checked_lora_settings(rank, targets, alpha)
        if self.built:
            add_adapters(self, self.lora)

    @property
    def lora_adapters(self):
        """`{target: (A, B)}`, the block's LoRA adapter variables by projection; empty without LoRA."""
        return adapters_of(self)

    def lora_trained_variables(self):
        """What trains with LoRA enabled: the adapters."""
        return [variable for pair in self.lora_adapters.values() for variable in pair]

    def _initializer(self, which):
        # A fresh initializer of the same kind per layer, so that no two layers share one's seed.
        initializer = self.kernel_initializer if which == "kernel" else self.bias_initializer
        return initializer.__class__.from_config(initializer.get_config())

    def _layer_norm(self, name, inputs_shape):
        layer = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        layer.build(inputs_shape)
        return layer

    def _dense(self, units, name, inputs_shape, activation=None):
        layer = keras.layers.Dense(
            units, activation=activation, kernel_initializer=self._initializer("kernel"),
            bias_initializer=self._initializer("bias"), dtype=self.dtype_policy, name=name,
        )
        layer.build(inputs_shape)
        return layer

    def call(self, inputs, padding_mask=None, training=None, return_attention_scores=False, attention_mask=None):
        """The block's output `(batch, sequence, hidden_dim)`; with `return_attention_scores`, `(output, probabilities)`.

        `padding_mask` `(batch, sequence)` is 1 (True) on tokens and 0 on
        padding: no token attends to padding. `attention_mask` `(batch,
        query, key)`, where given, says instead which keys each query
        attends (1) and which it does not (0): the examples of a packed row
        attend each to itself. The probabilities are `(batch, heads, query,
        key)`, before dropout.
        """
        mask = padding_mask if attention_mask is None else attention_mask
        return transformer_block(self, inputs, padding_mask=mask, training=training,
                                 return_attention_scores=return_attention_scores)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": keras.activations.serialize(self.activation),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "normalize_first": self.normalize_first,
        })
        if self.lora is not None:
            config["lora"] = {**self.lora, "targets": list(self.lora["targets"])}
        return config


# Files of kbert 0.4 name the class by its old name.
keras.saving.get_custom_objects()["kbert>LeanTransformerEncoder"] = TransformerBlock
