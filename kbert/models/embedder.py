"""Sentence embeddings and per-token features from a BERT encoder, on raw text."""

import keras

from kbert.models.task_model import TaskModel, encoder_and_preprocessor

POOLINGS = ("mean", "cls", "pooled")


@keras.saving.register_keras_serializable(package="kbert")
class Embedder(TaskModel):
    """Turns texts into vectors: one per sentence, and features for every token.

    Nothing is trained: the encoder's outputs are read as they are, which is
    useful once the encoder has learned something (pretrained, or fine-tuned
    inside another task model). `predict(texts)` returns a dict of arrays:

    - `sentence_embedding`, `(examples, hidden_dim)`: the last layer's token
      vectors pooled into one, by `pooling`:
      `"mean"`, their average over the real tokens (padding excluded; the
      sentence-transformers convention), `"cls"`, the `[CLS]` token's vector,
      or `"pooled"`, the encoder's tanh pooler output on `[CLS]` (what
      `kbert.Classifier` reads); with `normalize`, scaled to unit L2 norm,
      so that dot products are cosine similarities;
    - `token_features`, `(examples, sequence_length, hidden_dim * len(feature_layers))`:
      the outputs of the chosen Transformer blocks, concatenated per token,
      as in the BERT paper's feature-based approach (its best NER features
      concatenate the last four layers: `feature_layers=(-4, -3, -2, -1)`);
    - `padding_mask`, `(examples, sequence_length)`: 1 on real tokens, 0 on
      padding, to tell which token features are real.

    `embed(texts)` returns the sentence embeddings alone. Outputs are
    float32 whatever the encoder's dtype policy. Text pairs
    `(texts_a, texts_b)` are packed as one sequence, as everywhere in kbert.

    Args:
        encoder: a `kbert.Encoder`.
        preprocessor: a `kbert.EmbedderPreprocessor`, or a
            `kbert.TextPacker` whose tokenizer matches the encoder's
            vocabulary (wrapped into one).
        pooling: `"mean"`, `"cls"` or `"pooled"`.
        normalize: scale sentence embeddings to unit L2 norm.
        feature_layers: which Transformer blocks give `token_features`, as
            indices into the encoder's `encoder_outputs` (0 is the first
            block, -1 the last).

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat on the mat", "a dog ran"] * 5, vocabulary_size=60, verbose=False)
    >>> embedder = kbert.embedder("tiny", vocabulary=vocab, sequence_length=16, normalize=True)
    >>> embedder.embed(["the cat sat", "a dog ran"]).shape
    (2, 128)
    >>> embedder.predict(["the cat sat"], verbose=0)["token_features"].shape
    (1, 16, 128)
    """

    def __init__(self, encoder, preprocessor=None, pooling="mean", normalize=False, feature_layers=(-1,),
                 text_pairs=None, **kwargs):
        encoder, preprocessor = encoder_and_preprocessor(
            encoder, preprocessor, _embedder_preprocessor, text_pairs=text_pairs
        )
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}.")
        feature_layers = _check_feature_layers(feature_layers, encoder.num_layers)

        # === Layers ===
        self.encoder = encoder

        # === Functional model ===
        inputs = encoder.input
        outputs = encoder(inputs)
        padding_mask = inputs["padding_mask"]
        # Pooling and normalising in float32: a bfloat16 sum over tokens loses digits.
        sequence = keras.ops.cast(outputs["sequence_output"], "float32")
        if pooling == "mean":
            weights = keras.ops.expand_dims(keras.ops.cast(padding_mask, "float32"), -1)
            counts = keras.ops.maximum(keras.ops.sum(weights, axis=1), 1e-9)
            sentence = keras.ops.sum(sequence * weights, axis=1) / counts
        elif pooling == "cls":
            sentence = sequence[:, 0, :]
        else:
            sentence = keras.ops.cast(outputs["pooled_output"], "float32")
        if normalize:
            norms = keras.ops.sqrt(keras.ops.sum(keras.ops.square(sentence), axis=-1, keepdims=True))
            sentence = sentence / keras.ops.maximum(norms, 1e-12)
        chosen = [keras.ops.cast(outputs["encoder_outputs"][i], "float32") for i in feature_layers]
        token_features = chosen[0] if len(chosen) == 1 else keras.ops.concatenate(chosen, axis=-1)
        super().__init__(
            inputs=inputs,
            outputs={
                "sentence_embedding": sentence,
                "token_features": token_features,
                "padding_mask": keras.ops.cast(padding_mask, "int32"),
            },
            preprocessor=preprocessor,
            **kwargs,
        )

        # === Config ===
        self.pooling = pooling
        self.normalize = bool(normalize)
        self.feature_layers = feature_layers

    def embed(self, x, batch_size=None, **kwargs):
        """The sentence embeddings of texts (or text pairs), shape `(examples, hidden_dim)`."""
        kwargs.setdefault("verbose", 0)
        return self.predict(x, batch_size=batch_size, **kwargs)["sentence_embedding"]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "pooling": self.pooling,
                "normalize": self.normalize,
                "feature_layers": list(self.feature_layers),
            }
        )
        return config


def _embedder_preprocessor():
    from kbert.preprocessing.embedder_preprocessor import EmbedderPreprocessor

    return EmbedderPreprocessor


def _check_feature_layers(feature_layers, num_layers):
    if isinstance(feature_layers, int):
        feature_layers = (feature_layers,)
    feature_layers = tuple(feature_layers)
    if not feature_layers:
        raise ValueError("`feature_layers` must name at least one layer, e.g. (-1,).")
    for index in feature_layers:
        if isinstance(index, bool) or int(index) != index or not -num_layers <= index < num_layers:
            raise ValueError(
                f"`feature_layers` entry {index!r} is not a layer of this {num_layers}-layer encoder; "
                f"use 0 to {num_layers - 1}, or -1 to -{num_layers} from the last."
            )
    feature_layers = tuple(int(index) for index in feature_layers)
    normalized = [index % num_layers for index in feature_layers]
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"`feature_layers` {feature_layers} names a layer twice.")
    return feature_layers
