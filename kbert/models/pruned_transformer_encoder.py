"""A Transformer block whose attention heads keep their size when some are removed."""

import keras
import keras_hub


@keras.saving.register_keras_serializable(package="kbert")
class PrunedTransformerEncoder(keras_hub.layers.TransformerEncoder):
    """keras-hub's `TransformerEncoder` with an explicit attention head size.

    keras-hub sizes each head as `hidden_dim // num_heads`. After heads are
    removed from a block (`kbert.prune_heads`), the remaining `num_heads`
    heads keep the size they had in the full block, `head_dim`: the query,
    key and value kernels are `(hidden_dim, num_heads, head_dim)` and the
    attention output kernel `(num_heads, head_dim, hidden_dim)`, so
    `num_heads * head_dim` may be less than `hidden_dim`. Everything else
    (layers, variable names and paths, computation) is keras-hub's.

    `kbert.Encoder` uses this block for the layers that `heads_per_layer`
    gives fewer heads than `num_heads`.

    Args:
        intermediate_dim: width of the feed-forward layer.
        num_heads: the heads the block has.
        head_dim: the size of each head (the key, query and value width).
        **kwargs: the other arguments of `keras_hub.layers.TransformerEncoder`.

    Example:
    >>> block = PrunedTransformerEncoder(intermediate_dim=32, num_heads=1, head_dim=8)
    >>> block(np.zeros((2, 5, 16), "float32")).shape
    TensorShape([2, 5, 16])
    >>> tuple(block._self_attention_layer._query_dense.kernel.shape)
    (16, 1, 8)
    """

    def __init__(self, intermediate_dim, num_heads, head_dim, **kwargs):
        super().__init__(intermediate_dim=intermediate_dim, num_heads=num_heads, **kwargs)
        self.head_dim = head_dim

    def build(self, inputs_shape):
        super().build(inputs_shape)
        # keras-hub's block has just built an attention layer with heads of
        # `hidden_dim // num_heads`; it is replaced by one with heads of
        # `head_dim`, under the same name and at the same place among the
        # block's layers (so that the weights keep the order of a full block).
        replaced = self._self_attention_layer
        position = next(i for i, layer in enumerate(self._layers) if layer is replaced)
        self._tracker.untrack(replaced)
        attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self.head_dim,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="self_attention_layer",
        )
        self._self_attention_layer = attention
        self._layers.insert(position, self._layers.pop())
        attention.build(query_shape=inputs_shape, value_shape=inputs_shape)

    def get_config(self):
        config = super().get_config()
        config["head_dim"] = self.head_dim
        return config


def _clone(initializer):
    # A fresh initializer of the same kind, so that no two layers share one's seed.
    return initializer.__class__.from_config(initializer.get_config())
