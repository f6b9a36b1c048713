"""kbert's encoder and tokenizer to and from keras-hub's (and keras-nlp's) BERT and ALBERT.

`BertBackbone` and `BertTokenizer` for BERT, `AlbertBackbone` and
`AlbertTokenizer` for ALBERT. The encoders' weights are matched by path and
shape (`kbert.models.keras_hub_encoders` says how); keras-hub's
`BertBackbone` computes GELU's tanh approximation, kbert the exact GELU, so
with the same weights their outputs differ by about 1e-5 to 1e-4. keras-nlp
0.32 is an alias of keras-hub 0.32: its classes are the same objects.
"""

from kbert.models.encoder import Encoder


def encoder_from_keras_hub(backbone, dropout=None, dtype=None, attention_dropout=None):
    """A `kbert.Encoder` with the weights of a keras-hub (or keras-nlp) `BertBackbone` or `AlbertBackbone`.

    The same as `kbert.Encoder.from_keras_hub` (see there).
    """
    return Encoder.from_keras_hub(backbone, dropout=dropout, dtype=dtype, attention_dropout=attention_dropout)


def encoder_to_keras_hub(encoder):
    """A keras-hub `BertBackbone` (or `AlbertBackbone`) with a `kbert.Encoder`'s shape, dropout, dtype and weights.

    The same as `kbert.Encoder.to_keras_hub` (see there).
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"Expected a kbert.Encoder, got {type(encoder).__name__}.")
    return encoder.to_keras_hub()


def tokenizer_from_keras_hub(tokenizer):
    """A kbert tokenizer with a keras-hub `BertTokenizer`'s vocabulary and casing, or an `AlbertTokenizer`'s model.

    For a `BertTokenizer`, a `kbert.Tokenizer`: accents are stripped when the
    text is lowercased, as in BERT's uncased models, whatever the keras-hub
    tokenizer's own `strip_accents`. For an `AlbertTokenizer`, a
    `kbert.SentencePieceTokenizer` on the same SentencePiece model, which
    prepares text as ALBERT's reference does (lower-cased, accents
    stripped), where keras-hub's tokenizer applies the model alone.
    """
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.AlbertTokenizer):
        from kbert.preprocessing.sentence_piece_tokenizer import SentencePieceTokenizer

        return SentencePieceTokenizer(tokenizer.proto)
    from kbert.preprocessing.tokenizer import Tokenizer

    return Tokenizer(tokenizer.get_vocabulary(), lowercase=tokenizer.lowercase)


def tokenizer_to_keras_hub(tokenizer):
    """A keras-hub tokenizer for a kbert one: a `BertTokenizer` that splits text as a `kbert.Tokenizer` does,
    or an `AlbertTokenizer` on a `kbert.SentencePieceTokenizer`'s model (which does not lower-case or
    strip accents itself)."""
    import keras_hub

    from kbert.preprocessing.sentence_piece_tokenizer import SentencePieceTokenizer

    if isinstance(tokenizer, SentencePieceTokenizer):
        return keras_hub.tokenizers.AlbertTokenizer(proto=tokenizer.proto)
    return keras_hub.tokenizers.BertTokenizer(
        vocabulary=tokenizer.get_vocabulary(),
        lowercase=tokenizer.lowercase,
        strip_accents=tokenizer.strip_accents,
    )
