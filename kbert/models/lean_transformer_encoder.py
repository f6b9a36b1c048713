"""BERT's Transformer block: keras-hub's, computed as few, large ops on each backend."""

import keras
import keras_hub

from kbert.backend import transformer_block


@keras.saving.register_keras_serializable(package="kbert")
class LeanTransformerEncoder(keras_hub.layers.TransformerEncoder):
    """keras-hub's `TransformerEncoder`, computed as fewer, larger ops on each backend.

    The block has keras-hub's layers and variables (names, shapes, order),
    so checkpoints, `.keras` files and exports read and write it as they do
    keras-hub's block, and it gives the same outputs and gradients (within
    float32 round-off). Only the post-LayerNorm form (`normalize_first=False`,
    BERT's) is computed differently; other calls fall back to keras-hub's.

    What differs is `call`: `kbert.backend.transformer_block`, written for
    the backend Keras runs on. On TensorFlow it is a graph of 2-D ops that
    the grappler remapper fuses into oneDNN kernels (`MatMul + BiasAdd +
    GELU` as one); on JAX and PyTorch it is `keras.ops` code with one matmul
    for queries, keys and values and attention through the backend's fused
    kernel (cuDNN's on a JAX GPU, `scaled_dot_product_attention` on PyTorch).

    Args:
        intermediate_dim: width of the feed-forward layer.
        num_heads: attention heads.
        head_dim: the size of each head; default `hidden_dim // num_heads`.
            A block whose heads were pruned (`kbert.prune_heads`) keeps
            fewer heads of the full block's size, so `num_heads * head_dim`
            may be less than `hidden_dim`.
        attention_dropout: dropout of the attention probabilities; default
            `dropout` (keras-hub's block has one rate for both). At 0, a
            training step attends through the backend's fused kernel too.
        **kwargs: the other arguments of `keras_hub.layers.TransformerEncoder`.

    Example:
    >>> block = LeanTransformerEncoder(intermediate_dim=32, num_heads=2)
    >>> x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    >>> tuple(block(x, padding_mask=np.array([[1, 1, 1, 0, 0], [1] * 5])).shape)
    (2, 5, 16)
    """

    def __init__(self, intermediate_dim, num_heads, head_dim=None, attention_dropout=None, **kwargs):
        super().__init__(intermediate_dim=intermediate_dim, num_heads=num_heads, **kwargs)
        self.head_dim = head_dim
        self.attention_dropout = self.dropout if attention_dropout is None else attention_dropout

    def build(self, inputs_shape):
        super().build(inputs_shape)
        head_dim = inputs_shape[-1] // self.num_heads if self.head_dim is None else self.head_dim
        if head_dim == inputs_shape[-1] // self.num_heads and self.attention_dropout == self.dropout:
            return
        # keras-hub's block has just built an attention layer with heads of
        # `hidden_dim // num_heads` that drops out at `dropout`; it is
        # replaced by one with heads of `head_dim` that drops out at
        # `attention_dropout`, under the same name and at the same place
        # among the block's layers (so that the weights keep the order of a
        # full block).
        replaced = self._self_attention_layer
        position = next(i for i, layer in enumerate(self._layers) if layer is replaced)
        self._tracker.untrack(replaced)
        attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            dropout=self.attention_dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=self.dtype_policy,
            name="self_attention_layer",
        )
        self._self_attention_layer = attention
        self._layers.insert(position, self._layers.pop())
        attention.build(query_shape=inputs_shape, value_shape=inputs_shape)

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None,
             return_attention_scores=False):
        if self.normalize_first or attention_mask is not None:
            return super().call(inputs, padding_mask=padding_mask, attention_mask=attention_mask,
                                training=training, return_attention_scores=return_attention_scores)
        return transformer_block(self, inputs, padding_mask=padding_mask, training=training,
                                 return_attention_scores=return_attention_scores)

    def get_config(self):
        config = super().get_config()
        config["head_dim"] = self.head_dim
        config["attention_dropout"] = self.attention_dropout
        return config


def _clone(initializer):
    # A fresh initializer of the same kind, so that no two layers share one's seed.
    return initializer.__class__.from_config(initializer.get_config())
