"""The BERT encoder (and ALBERT's): embeddings, a stack of Transformer blocks, a pooler."""

import numbers

import keras
import keras_hub

from kbert.backend import LayersBeforeInit
from kbert.io.atomic_files import SavesAtomically
from kbert.models.constructor_config import ConstructorConfig
from kbert.models.encoder_arguments import check_encoder_arguments, checked_heads_per_layer, layer_block_indices
from kbert.models.lora_adapters import EncoderLora
from kbert.models.transformer_block import TransformerBlock
from kbert.models.presets import PRESETS, preset_config
# Config entries with one value per layer: `Encoder.truncated` keeps the
# values of the layers it keeps.
PER_LAYER_CONFIG = ("heads_per_layer",)
# The layers before and after the Transformer blocks, which a truncated encoder copies.
NON_BLOCK_LAYERS = (
    "token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm",
    "embedding_projection", "pooler_dense",
)


@keras.saving.register_keras_serializable(package="kbert")
def gelu_approximate(x):
    """GELU's tanh approximation (`gelu_new` in Hugging Face configs)."""
    return keras.activations.gelu(x, approximate=True)


def _activation(name):
    # keras' "gelu" is the exact one by default.
    return "gelu" if name == "gelu" else gelu_approximate


def bert_initializer():
    """BERT's weight initialisation: a normal truncated at two sigma, sigma 0.02."""
    return keras.initializers.TruncatedNormal(stddev=0.02)


def packed_attention_mask(example_ids):
    """Which keys each query attends in packed rows: `(rows, query, key)`, 1 within the query's own example.

    A padding query (id 0) attends every key of its row: its output is never
    read, and a query with no key at all would make some kernels' softmax
    NaN, whose gradient would reach the weights.
    """
    ids = keras.ops.convert_to_tensor(example_ids)
    same = keras.ops.equal(ids[:, :, None], ids[:, None, :])
    return keras.ops.cast(keras.ops.logical_or(same, keras.ops.equal(ids, 0)[:, :, None]), "int32")


def tokens_by_example(values, inputs):
    """Per-token `values` `(rows, width, ...)` of a packed batch, by example: `(values, is_token)`.

    `values` come back `(examples, width, ...)`: each example's tokens from
    its `[CLS]` on, in the examples' order; `is_token` `(examples, width)`
    says which entries are the example's own tokens (the rest belong to
    other examples or to padding). A token is the example's own where its
    position id is its distance from the example's `[CLS]`.
    """
    positions = keras.ops.reshape(inputs["position_ids"], (-1,))
    padding = keras.ops.reshape(inputs["padding_mask"], (-1,))
    total = keras.ops.shape(positions)[0]
    columns = keras.ops.arange(keras.ops.shape(inputs["position_ids"])[1], dtype="int32")
    index = keras.ops.cast(inputs["cls_positions"], "int32")[:, None] + columns[None, :]
    inside = keras.ops.minimum(index, total - 1)
    is_token = keras.ops.logical_and(
        keras.ops.logical_and(keras.ops.less(index, total),
                              keras.ops.equal(keras.ops.take(positions, inside), columns[None, :])),
        keras.ops.greater(keras.ops.take(padding, inside), 0))
    flat = keras.ops.reshape(values, (-1, *values.shape[2:]))
    return keras.ops.take(flat, inside, axis=0), is_token


@keras.saving.register_keras_serializable(package="kbert")
class Encoder(SavesAtomically, LayersBeforeInit, ConstructorConfig, EncoderLora, keras.Model):
    """BERT's bidirectional Transformer encoder (Devlin et al., 2019).

    Token, segment and learned position embeddings are summed, normalised
    (LayerNorm, epsilon 1e-12) and dropped out; `num_layers` post-LayerNorm
    Transformer blocks (`TransformerBlock`: kbert's block, on
    keras-hub's variables, computed as fewer, larger ops; exact GELU)
    follow;
    a dense tanh pooler reads the first token (`[CLS]`).

    Two options make it ALBERT's encoder (Lan et al., 2019; see the
    `albert-*` presets):

    - **Factorized embeddings**: with `embedding_size` E smaller than
      `hidden_dim` H, the embeddings are E wide and a dense layer projects
      them to H (V x E + E x H weights instead of V x H).
    - **Cross-layer parameter sharing**: the `num_layers` layers are split
      into `num_groups` equal runs; all layers of a run apply the same
      blocks (`num_inner_repetitions` of them, one after the other), so
      with `num_groups=1` every layer shares one set of weights. The
      default, `num_groups=num_layers`, shares nothing (BERT).

    With `embedding_size=hidden_dim` (the default) and no sharing the
    encoder is exactly BERT's: the same variables and outputs.

    After attention-head pruning (`kbert.prune_heads`, Michel et al., 2019)
    layers may keep fewer heads: `heads_per_layer` gives each layer's
    count. A head keeps its size, `hidden_dim // num_heads`, so a layer with
    k heads has query, key and value kernels of `(hidden_dim, k, head size)`
    and less to compute. Head-pruned encoders save and load as `.keras`
    files and export; the checkpoint writers (`kbert.save_pretrained`,
    `to_keras_hub`) refuse them, as those formats have every head.

    Inputs are a dict of int tensors of shape `(batch, sequence)`:
    `token_ids`, `segment_ids` (0 or 1) and `padding_mask` (1 on real tokens).
    Outputs are a dict:

    - `sequence_output`: the last block's output, `(batch, sequence, hidden_dim)`;
    - `pooled_output`: the pooled `[CLS]` vector, `(batch, hidden_dim)`;
    - `encoder_outputs`: a list with every block's output, for feature
      extraction.

    The constructor takes the whole configuration, each size its own
    argument (16 of them, as keras-hub's backbones take theirs): they are
    what `get_config` round-trips and what checkpoint configs map onto.

    Args:
        vocabulary_size: tokens in the vocabulary.
        num_layers: Transformer blocks (L).
        hidden_dim: width of every token vector (H).
        num_heads: attention heads (A); must divide `hidden_dim`.
        intermediate_dim: width of the feed-forward layer (4H in BERT).
        dropout: dropout rate of the embeddings, of each attention and
            feed-forward output, and by default of the attention
            probabilities.
        attention_dropout: dropout rate of the attention probabilities;
            default `dropout` (BERT's 0.1 for both). On PyTorch, training
            attends through `scaled_dot_product_attention` at any rate (it
            drops out itself); on JAX, at 0 (as MosaicBERT and ModernBERT
            train), through cuDNN's kernel on a GPU, instead of computing the
            probabilities explicitly.
        max_sequence_length: positions with a learned embedding.
        num_segments: segment (token type) ids the model knows.
        embedding_size: width of the token, segment and position embeddings
            (E); default `hidden_dim`, without a projection.
        num_groups: runs of layers that share weights; must divide
            `num_layers`. Default `num_layers` (no sharing).
        num_inner_repetitions: distinct blocks in each group, applied in
            turn at every layer of the group.
        activation: `"gelu"` (exact, BERT's) or `"gelu_approximate"` (tanh
            form, ALBERT's).
        heads_per_layer: the attention heads each layer keeps, a list of
            `num_layers` integers from 1 to `num_heads`; default None:
            `num_heads` in every layer. Not for shared layers (ALBERT).
        dtype: a dtype or `keras.DTypePolicy`, e.g. `"mixed_bfloat16"`.

    Example:
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=1000)
    >>> outputs = encoder({
    ...     "token_ids": np.array([[2, 7, 9, 3, 0]]),
    ...     "segment_ids": np.zeros((1, 5), "int32"),
    ...     "padding_mask": np.array([[1, 1, 1, 1, 0]]),
    ... })
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    (TensorShape([1, 5, 128]), TensorShape([1, 128]))
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        embedding_size=None,
        num_groups=None,
        num_inner_repetitions=1,
        activation="gelu",
        heads_per_layer=None,
        dtype=None,
        attention_dropout=None,
        **kwargs,
    ):
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        embedding_size = hidden_dim if embedding_size is None else embedding_size
        num_groups = num_layers if num_groups is None else num_groups
        check_encoder_arguments(
            vocabulary_size=vocabulary_size, num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, max_sequence_length=max_sequence_length, num_segments=num_segments,
            embedding_size=embedding_size, num_groups=num_groups, num_inner_repetitions=num_inner_repetitions,
            activation=activation, dropout=dropout, attention_dropout=attention_dropout,
        )
        shared = num_groups != num_layers or num_inner_repetitions != 1
        if heads_per_layer is not None:
            heads_per_layer = checked_heads_per_layer(heads_per_layer, num_layers, num_heads, shared)

        # === Layers ===
        self._make_embeddings(vocabulary_size, max_sequence_length, num_segments, embedding_size, hidden_dim,
                              dropout, dtype)

        def block(name, heads=num_heads):
            # Pruned layers keep fewer heads, each of the full encoder's head size.
            return TransformerBlock(
                num_heads=heads, head_dim=hidden_dim // num_heads, intermediate_dim=intermediate_dim,
                dropout=dropout, attention_dropout=attention_dropout, activation=_activation(activation),
                layer_norm_epsilon=1e-12, kernel_initializer=bert_initializer(), normalize_first=False,
                dtype=dtype, name=name,
            )

        # The distinct blocks: one per layer (BERT), or per group and inner
        # repetition (ALBERT), applied in the order `layer_blocks` gives.
        if shared:
            self.transformer_layers = [
                block(f"transformer_group_{g}_layer_{k}")
                for g in range(num_groups)
                for k in range(num_inner_repetitions)
            ]
        else:
            heads = heads_per_layer or [num_heads] * num_layers
            self.transformer_layers = [block(f"transformer_layer_{i}", heads[i]) for i in range(num_layers)]
        self.layer_blocks = [
            [self.transformer_layers[i] for i in indices]
            for indices in layer_block_indices(num_layers, num_groups, num_inner_repetitions)
        ]
        self.pooler_dense = keras.layers.Dense(
            hidden_dim,
            activation="tanh",
            kernel_initializer=bert_initializer(),
            dtype=dtype,
            name="pooler_dense",
        )

        # === Functional model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embed(token_ids, segment_ids)
        encoder_outputs = []
        for blocks in self.layer_blocks:
            for layer in blocks:
                x = layer(x, padding_mask=padding_mask)
            encoder_outputs.append(x)
        pooled = self.pooler_dense(x[:, 0, :])
        super().__init__(
            inputs={
                "token_ids": token_ids,
                "segment_ids": segment_ids,
                "padding_mask": padding_mask,
            },
            outputs={
                "sequence_output": x,
                "pooled_output": pooled,
                "encoder_outputs": encoder_outputs,
            },
            dtype=dtype,
            **kwargs,
        )

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.embedding_size = embedding_size
        self.num_groups = num_groups
        self.num_inner_repetitions = num_inner_repetitions
        self.activation = activation
        self.heads_per_layer = heads_per_layer
        # The checkpoint the encoder was loaded from, where a builder knows it
        # (named by a LoRA adapter file as its base); not part of the config.
        self.base_name = None

    def copy(self):
        """A new encoder of this one's config and weights (LoRA adapters included), trained apart from this one."""
        config = self.get_config()
        del config["name"]
        copied = Encoder.from_config(config)
        copied.set_weights(self.get_weights())
        copied.base_name = self.base_name
        return copied

    def _make_embeddings(self, vocabulary_size, max_sequence_length, num_segments, embedding_size, hidden_dim,
                         dropout, dtype):
        """The embedding layers: token, position and segment tables, their sum's norm and dropout, a projection."""
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=embedding_size,
            embeddings_initializer=bert_initializer(),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = keras_hub.layers.PositionEmbedding(
            sequence_length=max_sequence_length,
            initializer=bert_initializer(),
            dtype=dtype,
            name="position_embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            input_dim=num_segments,
            output_dim=embedding_size,
            embeddings_initializer=bert_initializer(),
            dtype=dtype,
            name="segment_embedding",
        )
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=1e-12, dtype=dtype, name="embeddings_layer_norm"
        )
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.embedding_projection = None
        if embedding_size != hidden_dim:
            self.embedding_projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=bert_initializer(),
                dtype=dtype,
                name="embedding_projection",
            )

    @property
    def is_head_pruned(self):
        """Whether some layer has fewer than `num_heads` attention heads (see `heads_per_layer`)."""
        return self.heads_per_layer is not None and any(k != self.num_heads for k in self.heads_per_layer)

    def embed(self, token_ids, segment_ids, training=None, position_ids=None):
        """The first Transformer block's input: summed embeddings, normalised, dropped out, projected.

        Positions are 0, 1, ... along each row, or `position_ids` where given
        (the examples of a packed row each start at 0).
        """
        tokens = self.token_embedding(token_ids)
        positions = self.position_embedding(tokens, positions=position_ids)
        segments = self.segment_embedding(segment_ids)
        x = self.embeddings_add([tokens, positions, segments])
        x = self.embeddings_dropout(self.embeddings_layer_norm(x), training=training)
        if self.embedding_projection is not None:
            x = self.embedding_projection(x)
        return x

    def packed_sequence_output(self, inputs, training=None):
        """The last block's output `(rows, width, hidden_dim)` for a packed batch (`kbert.preprocessing.packing`).

        Each example of a row is embedded at its own positions and attends
        only to its own tokens (`packed_attention_mask`), so its vectors are
        those it gets alone in a row of its own.
        """
        x = self.embed(inputs["token_ids"], inputs["segment_ids"], training=training,
                       position_ids=inputs["position_ids"])
        mask = packed_attention_mask(inputs["example_ids"])
        for blocks in self.layer_blocks:
            for layer in blocks:
                x = layer(x, attention_mask=mask, training=training)
        return x

    def packed_pooled_output(self, inputs, training=None):
        """The pooler's output `(examples, hidden_dim)` for a packed batch: each example's own `[CLS]` vector, pooled."""
        sequence = self.packed_sequence_output(inputs, training=training)
        first_tokens = keras.ops.take(keras.ops.reshape(sequence, (-1, sequence.shape[-1])),
                                      inputs["cls_positions"], axis=0)
        return self.pooler_dense(first_tokens)

    @property
    def layer_dtype_policy(self):
        """The dtype policy the encoder's layers compute in (e.g. `mixed_bfloat16`); heads use it too."""
        # The functional wrapper reports float32; its layers hold the policy.
        return self.token_embedding.dtype_policy

    @classmethod
    def from_preset(cls, name, vocabulary_size=None, load_weights=False, **kwargs):
        """A fresh, untrained encoder of a preset size (see `kbert.PRESETS`), embedding `vocabulary_size` tokens.

        kbert's presets are sizes, without weights: where keras-hub's
        `from_preset` loads a preset's weights, this builds an encoder to
        pretrain or distil into, as keras-hub's `from_preset(...,
        load_weights=False)` does. Pretrained weights (Hugging Face, Google,
        and keras-hub's presets such as "bert_base_en_uncased") come from
        `kbert.load_pretrained`; a name that is not a kbert size, or
        `load_weights=True`, is refused with an error that says so.

        Keyword arguments override the preset's, e.g. `dropout=0.0` or
        `num_layers=3`.

        Example:
        >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=100, num_layers=1)
        >>> encoder.num_layers, encoder.hidden_dim
        (1, 128)
        >>> kbert.Encoder.from_preset("bert_base_en_uncased")
        Traceback (most recent call last):
        ...
        ValueError: 'bert_base_en_uncased' is not a kbert preset (a size: ['tiny', ...]); for pretrained
        weights, use kbert.load_pretrained('bert_base_en_uncased').
        """
        if name not in PRESETS or load_weights:
            said = f"{name!r} is not a kbert preset (a size: {list(PRESETS)})" if name not in PRESETS else (
                f"kbert's presets are sizes, without weights: from_preset({name!r}) builds a fresh encoder")
            raise ValueError(f"{said}; for pretrained weights, use kbert.load_pretrained({name!r}).")
        if vocabulary_size is None:
            raise ValueError(f"A fresh {name!r} encoder embeds the tokens of your vocabulary: give "
                             "`vocabulary_size`. For pretrained weights, use kbert.load_pretrained.")
        config = preset_config(name)
        config.update(kwargs)
        return cls(vocabulary_size=vocabulary_size, **config)

    @classmethod
    def from_keras_hub(cls, backbone, dropout=None, dtype=None, attention_dropout=None):
        """An encoder with the shape and weights of a keras-hub (or keras-nlp) `BertBackbone` or `AlbertBackbone`.

        From a `BertBackbone`, kbert computes the exact GELU where keras-hub
        uses its tanh approximation; with the same weights, outputs differ
        by about 1e-5 to 1e-4. From an `AlbertBackbone`, the encoder has its
        embedding size, groups and tanh GELU, and equal outputs. `dropout`
        and `dtype` default to the backbone's, `attention_dropout` to
        `dropout` (keras-hub's backbones have one rate).

        Example:
        >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=50, num_layers=1,
        ...     num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16)
        >>> encoder = kbert.Encoder.from_keras_hub(backbone)
        >>> encoder.num_layers, encoder.hidden_dim
        (1, 8)
        """
        from kbert.models.keras_hub_encoders import encoder_from_backbone

        return encoder_from_backbone(cls, backbone, dropout=dropout, dtype=dtype,
                                     attention_dropout=attention_dropout)

    def to_keras_hub(self):
        """A keras-hub `BertBackbone` (`AlbertBackbone` for an ALBERT) with this encoder's shape, dropout, dtype and weights.

        Example:
        >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=50, num_layers=1)
        >>> backbone = encoder.to_keras_hub()
        >>> type(backbone).__name__, backbone.num_layers
        ('BertBackbone', 1)
        """
        from kbert.models.keras_hub_encoders import backbone_from_encoder

        return backbone_from_encoder(self)

    def truncated(self, layers):
        """A new encoder of the chosen layers: the same embeddings, those blocks in order, the same pooler.

        The layers are indices in `[0, num_layers)`, strictly increasing;
        everything else (widths, dropout, dtype) is this encoder's config and
        the weights are copies, so training the new encoder leaves this one
        as it is. DistilBERT (Sanh et al., 2019) starts its student from
        every other layer of the teacher: `encoder.truncated([0, 2, 4])` of
        a 6-layer encoder; `truncated(range(3))` keeps the bottom three.
        An ALBERT encoder whose layers share blocks cannot be truncated.

        Example:
        >>> teacher = kbert.Encoder.from_preset("tiny", vocabulary_size=50, num_layers=4)
        >>> student = teacher.truncated([0, 2])
        >>> student.num_layers, student.hidden_dim
        (2, 128)
        """
        layers = self._check_truncation(layers)
        config = self.get_config()
        del config["name"]  # a fresh name: the two may sit side by side in one model
        config["num_layers"] = config["num_groups"] = len(layers)
        for name in PER_LAYER_CONFIG:
            if config.get(name) is not None:
                config[name] = [config[name][i] for i in layers]
        encoder = Encoder.from_config(config)
        for name in NON_BLOCK_LAYERS:
            if getattr(self, name) is not None:
                getattr(encoder, name).set_weights(getattr(self, name).get_weights())
        for target, source in zip(encoder.transformer_layers, layers):
            target.set_weights(self.transformer_layers[source].get_weights())
        return encoder

    def _check_truncation(self, layers):
        """`layers` as a list of ints, or a clear error about what is wrong with it."""
        if self.num_groups != self.num_layers or self.num_inner_repetitions != 1:
            raise ValueError(
                "This ALBERT encoder shares its Transformer blocks across layers "
                f"(num_groups={self.num_groups}, num_inner_repetitions={self.num_inner_repetitions}, "
                f"num_layers={self.num_layers}): a layer has no weights of its own to keep or drop, "
                "so it cannot be truncated."
            )
        layers = list(layers)
        if not layers:
            raise ValueError("`layers` is empty: keep at least one layer.")
        for index in layers:
            if isinstance(index, bool) or not isinstance(index, numbers.Integral):
                raise TypeError(f"Layer indices must be integers, got {index!r} in {layers}.")
        layers = [int(index) for index in layers]
        for index in layers:
            if not 0 <= index < self.num_layers:
                raise ValueError(
                    f"Layer index {index} is out of range: this encoder has {self.num_layers} layers, "
                    f"indices 0 to {self.num_layers - 1}."
                )
        if any(a >= b for a, b in zip(layers, layers[1:])):
            raise ValueError(
                f"Layer indices must be strictly increasing (each layer once, in order), got {layers}."
            )
        return layers

    def get_config(self):
        config = super().get_config()
        config.update({
            "dtype": keras.saving.serialize_keras_object(self.layer_dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "num_segments": self.num_segments,
            "embedding_size": self.embedding_size,
            "num_groups": self.num_groups,
            "num_inner_repetitions": self.num_inner_repetitions,
            "activation": self.activation,
            "heads_per_layer": None if self.heads_per_layer is None else list(self.heads_per_layer),
        })
        if self.lora is not None:
            config["lora"] = {**self.lora, "targets": list(self.lora["targets"])}
        return config

    @classmethod
    def from_config(cls, config):
        # The LoRA setting is not a constructor argument: the encoder is built, then given its adapters.
        config = dict(config)
        lora = config.pop("lora", None)
        encoder = super().from_config(config)
        if lora is not None:
            encoder.enable_lora(**lora)
        return encoder
