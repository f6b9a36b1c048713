"""Entry points that build ready-to-fit task models from a preset or an encoder."""

from kbert.models.classifier import Classifier
from kbert.models.encoder import Encoder
from kbert.preprocessing.preprocessor import Preprocessor
from kbert.preprocessing.tokenizer import Tokenizer


def build_encoder_and_preprocessor(
    encoder, vocabulary, preprocessor, sequence_length, lowercase, dtype, encoder_kwargs
):
    """Resolves `encoder` (preset name or `Encoder`) and its preprocessor."""
    if preprocessor is None:
        if vocabulary is None:
            raise ValueError(
                "Give a `vocabulary` (a list of tokens or a vocab.txt path, e.g. from "
                "kbert.learn_vocabulary) or a `preprocessor`."
            )
        tokenizer = vocabulary if isinstance(vocabulary, Tokenizer) else Tokenizer(
            vocabulary, lowercase=lowercase
        )
        preprocessor = Preprocessor(tokenizer, sequence_length=sequence_length)
    elif vocabulary is not None:
        raise ValueError("Give either a `vocabulary` or a `preprocessor`, not both.")
    if isinstance(encoder, str):
        encoder = Encoder.from_preset(
            encoder,
            vocabulary_size=preprocessor.tokenizer.vocabulary_size(),
            max_sequence_length=max(512, preprocessor.sequence_length),
            dtype=dtype,
            **encoder_kwargs,
        )
    elif not isinstance(encoder, Encoder):
        raise TypeError(
            f"`encoder` must be a preset name or a kbert.Encoder, got {type(encoder).__name__}."
        )
    elif encoder_kwargs or dtype is not None:
        raise ValueError(
            "Encoder arguments (dtype, dropout, ...) apply to presets; this encoder is built already."
        )
    return encoder, preprocessor


def classifier(
    encoder="base",
    num_classes=2,
    vocabulary=None,
    sequence_length=128,
    preprocessor=None,
    lowercase=True,
    dropout=0.1,
    class_names=None,
    dtype=None,
    **encoder_kwargs,
):
    """A text or text-pair classifier that fits on raw strings.

    Args:
        encoder: a preset name (`"tiny"` ... `"large"`, see `kbert.PRESETS`),
            freshly initialised, or a `kbert.Encoder` (e.g. pretrained).
        num_classes: number of classes.
        vocabulary: the tokens (list or `vocab.txt` path) the encoder embeds.
        sequence_length: tokens per example after packing; longer texts are
            truncated.
        preprocessor: a ready `kbert.Preprocessor`, instead of `vocabulary`.
        lowercase: whether the vocabulary is uncased.
        dropout: dropout before the output layer, and in a preset encoder.
        class_names: optional names of the classes, in id order.
        dtype: the preset encoder's dtype policy, e.g. `"mixed_bfloat16"`.
        **encoder_kwargs: overrides of the preset, e.g. `num_layers=3`.

    Returns:
        A compiled `kbert.Classifier`: `fit(texts, labels)` or
        `fit((texts_a, texts_b), labels)` works as is.

    Example:
    >>> vocab = kbert.learn_vocabulary(["free prize now", "see you soon"] * 5, vocabulary_size=60)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> clf.predict(["free prize"]).shape
    (1, 2)
    """
    if isinstance(encoder, str):
        encoder_kwargs.setdefault("dropout", dropout)  # BERT uses one rate throughout.
    encoder, preprocessor = build_encoder_and_preprocessor(
        encoder, vocabulary, preprocessor, sequence_length, lowercase, dtype, encoder_kwargs
    )
    return Classifier(
        encoder,
        num_classes=num_classes,
        preprocessor=preprocessor,
        dropout=dropout,
        class_names=class_names,
    )
