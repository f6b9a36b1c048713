"""`resolve_encoder`: what an `encoder` argument names, as an encoder and its tokenizer.

The task builders (`kbert.classifier`, ...), `kbert train --encoder`,
`kbert distill --student` and `kbert fill-mask` all take an encoder by
one of these forms, and all ask this module which one it is.
"""

import os
import warnings

import keras_hub

from kbert.checkpoints.keras_hub_models import encoder_from_keras_hub
from kbert.checkpoints.loading import UnknownCheckpointError, load_pretrained, resolve_checkpoint
from kbert.io.setting_error import SettingError
from kbert.models.encoder import Encoder
from kbert.models.presets import PRESETS
from kbert.saving import load_model

# What `kbert pretrain` writes into its run folder: the model with its heads, and the vocabulary.
RUN_MODEL_FILE = "pretrainer.keras"
RUN_VOCABULARY_FILE = "vocab.txt"
ACCEPTED_FORMS = (
    "a .keras file (of an encoder, or of a model that has one), a `kbert pretrain` run folder, a preset "
    "name, a checkpoint, a kbert.Encoder or a keras-hub BertBackbone or AlbertBackbone"
)
# The objects that are encoders already: kbert's, and keras-hub's (or keras-nlp's) backbones.
_ENCODER_CLASSES = (Encoder, keras_hub.models.BertBackbone, keras_hub.models.AlbertBackbone)
# The encoder arguments that a loaded checkpoint or keras-hub backbone takes: its shape is fixed.
_LOADED_ARGUMENTS = ("dropout", "attention_dropout", "dtype")
# Those that an encoder built already takes (in a copy): its dtype is fixed too.
_BUILT_ARGUMENTS = ("dropout", "attention_dropout")


class UnknownEncoderError(ValueError, TypeError):
    """An `encoder` argument of no form that `resolve_encoder` knows; the message lists them.

    A `ValueError` for a name, a `TypeError` for an object of another type:
    it is both, so that either `except` catches it.
    """


def pretraining_run_files(argument):
    """`(model file, vocabulary file)` of a `kbert pretrain` run folder; None for any other argument."""
    if not isinstance(argument, (str, os.PathLike)):
        return None
    folder = os.fspath(argument)
    model = os.path.join(folder, RUN_MODEL_FILE)
    return (model, os.path.join(folder, RUN_VOCABULARY_FILE)) if os.path.isfile(model) else None


def resolve_encoder(argument, vocabulary=None, lowercase=True, heads=False, require_tokenizer=False,
                    vocabulary_size=None, sequence_length=None, role="preset", **encoder_arguments):
    """An encoder, and its tokenizer where it has one, from whatever names an encoder.

    `argument` is, tried in this order:

    - a `kbert.Encoder`: itself;
    - a keras-hub (or keras-nlp) `BertBackbone` or `AlbertBackbone`: an
      encoder with its shape and weights (`encoder_from_keras_hub`);
    - a preset name (`kbert.PRESETS`): a fresh encoder of that size that
      embeds `vocabulary`'s tokens;
    - a `kbert pretrain` run folder: its `pretrainer.keras`, with its
      `vocab.txt`;
    - a `.keras` file: the encoder it holds (alone, or in a task model or
      `kbert.Pretrainer`), read as `kbert.load_model` reads it (safe mode,
      sizes checked first);
    - any other string or path: a checkpoint folder or name
      (`resolve_checkpoint`: Hugging Face, Google and keras-hub folders,
      known names, keras-hub presets, Hugging Face Hub ids), read with its
      own tokenizer by `load_pretrained`.

    Args:
        argument: the encoder, in one of the forms above.
        vocabulary: for the forms without a tokenizer of their own, the
            tokens (a list or a `vocab.txt` path), a SentencePiece
            `spiece.model` path or a ready tokenizer; default for a run
            folder its `vocab.txt`. Refused with a checkpoint, which brings
            its own.
        lowercase: whether `vocabulary` is uncased.
        heads: deprecated: `resolve_pretrainer` gives the model with its
            pretraining heads.
        require_tokenizer: fail, before anything is loaded, when neither
            `argument` nor `vocabulary` gives a tokenizer.
        vocabulary_size: the tokens the encoder embeds: a preset's when no
            `vocabulary` gives it; an encoder of any other form must embed
            as many.
        sequence_length: tokens per packed text: a preset gets
            `max(512, sequence_length)` positions, a checkpoint must have
            that many.
        role: what the error calls a name of no known form: a mistyped
            preset, unless the caller's users know the argument by another
            name (`"student"`).
        **encoder_arguments: `kbert.Encoder` arguments: all of them
            override a preset's (e.g. `num_layers=3`, `dtype=...`); a
            checkpoint or a keras-hub backbone takes `dropout`,
            `attention_dropout` and `dtype`; an encoder built already its
            two dropout rates, in a copy. None stands for not given.

    Returns:
        `(encoder, tokenizer)`, the tokenizer None where neither `argument`
        nor `vocabulary` gives one.

    Raises:
        UnknownEncoderError: `argument` is of none of these forms; the
            message lists them, and why it is no checkpoint.

    Example:
    >>> vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]
    >>> encoder, tokenizer = resolve_encoder("tiny", vocabulary, num_layers=1)
    >>> encoder.num_layers, encoder.vocabulary_size, tokenizer.vocabulary_size()
    (1, 7, 7)
    >>> resolve_encoder(encoder) == (encoder, None)
    True
    """
    if heads:
        warnings.warn("`resolve_encoder(..., heads=True)` is deprecated: use `resolve_pretrainer(...)`; the "
                      "argument goes in the next release.", DeprecationWarning, stacklevel=2)
    return _resolved(argument, vocabulary, lowercase, heads, require_tokenizer, vocabulary_size, sequence_length,
                     role, encoder_arguments)


def resolve_pretrainer(argument, vocabulary=None, lowercase=True, require_tokenizer=False, **encoder_arguments):
    """A model with its pretraining heads, and its tokenizer where it has one, from whatever names one.

    The forms of `resolve_encoder` that hold heads: a `kbert pretrain` run
    folder or a `.keras` file (its model as saved), or a checkpoint (its
    `kbert.Pretrainer`: see `load_pretrained`); a preset or a built encoder
    has none, and is refused. The arguments are `resolve_encoder`'s.

    Returns:
        `(model, tokenizer)`, the tokenizer None where neither `argument`
        nor `vocabulary` gives one.

    Example:
    >>> resolve_pretrainer("tiny", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    Traceback (most recent call last):
    ...
    ValueError: The preset 'tiny' is a fresh encoder, without pretraining heads.
    """
    return _resolved(argument, vocabulary, lowercase, True, require_tokenizer, None, None, "preset",
                     encoder_arguments)


def _resolved(argument, vocabulary, lowercase, heads, require_tokenizer, vocabulary_size, sequence_length, role,
              encoder_arguments):
    if isinstance(argument, os.PathLike):
        argument = os.fspath(argument)
    if not isinstance(argument, (str, *_ENCODER_CLASSES)):
        raise UnknownEncoderError(f"Expected {ACCEPTED_FORMS}, got {type(argument).__name__}.")
    if isinstance(argument, str) and argument in PRESETS:
        return _preset_encoder(argument, vocabulary, lowercase, heads, vocabulary_size, sequence_length,
                               encoder_arguments)
    encoder_arguments = {name: value for name, value in encoder_arguments.items() if value is not None}
    run_files = pretraining_run_files(argument)
    if run_files is not None:
        argument, run_vocabulary = run_files
        vocabulary = run_vocabulary if vocabulary is None else vocabulary
    if isinstance(argument, str) and not argument.endswith(".keras"):
        model, tokenizer = _checkpoint(argument, vocabulary, heads, sequence_length, role, encoder_arguments)
    else:
        tokenizer = _given_tokenizer(argument, vocabulary, lowercase, require_tokenizer)
        model = _built_model(argument, heads, encoder_arguments)
    encoder = getattr(model, "encoder", model)
    if vocabulary_size is not None and encoder.vocabulary_size != vocabulary_size:
        raise ValueError(f"{_shown(argument)} embeds {encoder.vocabulary_size} tokens; "
                         f"{vocabulary_size} are needed here.")
    return model, tokenizer


def _shown(argument):
    """The argument as an error names it."""
    if isinstance(argument, str):
        return repr(argument)
    return f"the {type(argument).__name__} {getattr(argument, 'name', '')!r}"


def _preset_encoder(name, vocabulary, lowercase, heads, vocabulary_size, sequence_length, preset_arguments):
    if heads:
        raise ValueError(f"The preset {name!r} is a fresh encoder, without pretraining heads.")
    tokenizer = None
    if vocabulary is not None:
        tokenizer = _tokenizer(vocabulary, lowercase)
    elif vocabulary_size is None:
        raise SettingError(_vocabulary_needed(f"the preset {name!r}"), ["vocabulary"])
    if sequence_length is not None:
        preset_arguments.setdefault("max_sequence_length", max(512, sequence_length))
    encoder = Encoder.from_preset(
        name, vocabulary_size=vocabulary_size or tokenizer.vocabulary_size(), **preset_arguments
    )
    return encoder, tokenizer


def _vocabulary_needed(what):
    return (f"Give a `vocabulary` for {what}: the tokens it embeds (a list of tokens or a vocab.txt path, "
            "e.g. from kbert.learn_vocabulary; a SentencePiece spiece.model; or a ready tokenizer).")


def _tokenizer(vocabulary, lowercase):
    # Imported here: kbert's checkpoints are read without TensorFlow, its tokenizers are not.
    from kbert.preprocessing.tokenizer_choice import tokenizer_from_vocabulary

    return tokenizer_from_vocabulary(vocabulary, lowercase=lowercase)


def _given_tokenizer(argument, vocabulary, lowercase, require_tokenizer):
    """The tokenizer of `vocabulary`, for a form that has none of its own; checked before the model is read."""
    if vocabulary is not None:
        return _tokenizer(vocabulary, lowercase)
    if require_tokenizer:
        raise SettingError(_vocabulary_needed(_shown(argument)), ["vocabulary"])
    return None


def _checkpoint(name, vocabulary, heads, sequence_length, role, loaded_arguments):
    """A checkpoint folder or name as `(encoder or pretrainer, its tokenizer)`."""
    # Found (or downloaded) first, so that a mistyped preset fails as one.
    try:
        checkpoint = resolve_checkpoint(name)
    except UnknownCheckpointError as error:
        raise UnknownEncoderError(
            f"Unknown {role} {name!r}: the presets are {list(PRESETS)}; and {error} Give {ACCEPTED_FORMS}."
        ) from None
    if vocabulary is not None:
        raise SettingError(f"The checkpoint {name!r} brings its own vocabulary; give no `vocabulary`.",
                           ["vocabulary"])
    _refuse_others(loaded_arguments, _LOADED_ARGUMENTS, f"the checkpoint {name!r}")
    model, tokenizer = load_pretrained(checkpoint, heads=heads, **loaded_arguments)
    positions = getattr(model, "encoder", model).max_sequence_length
    if sequence_length is not None and sequence_length > positions:
        raise ValueError(f"`sequence_length` {sequence_length} exceeds the checkpoint's {positions} positions.")
    return model, tokenizer


def _refuse_others(arguments, allowed, shown):
    others = sorted(set(arguments) - set(allowed))
    if others:
        takes = f"it takes {', '.join(allowed)} alone" if allowed else "it takes none"
        raise ValueError(f"Encoder arguments {others} apply to presets; {shown} is built already ({takes}).")


def _built_model(argument, heads, encoder_arguments):
    """The model of a `.keras` file, a `kbert.Encoder` or a keras-hub backbone; an encoder unless `heads`."""
    if isinstance(argument, str):
        model = load_model(argument)
        if heads:
            _refuse_others(encoder_arguments, (), f"the model of {argument}")
            return model
        encoder = getattr(model, "encoder", model)
        if not isinstance(encoder, Encoder):
            raise ValueError(f"{argument} holds a {type(model).__name__}, not a kbert encoder.")
    else:
        if heads:
            raise ValueError(f"{_shown(argument)} is an encoder, without pretraining heads.")
        if not isinstance(argument, Encoder):  # a keras-hub backbone
            _refuse_others(encoder_arguments, _LOADED_ARGUMENTS, _shown(argument))
            return encoder_from_keras_hub(argument, **encoder_arguments)
        encoder = argument
    _refuse_others(encoder_arguments, _BUILT_ARGUMENTS, _shown(argument))
    return _with_dropout(encoder, **encoder_arguments) if encoder_arguments else encoder


def _with_dropout(encoder, **rates):
    """A copy of `encoder` (the same config and weights) with other dropout rates; the given one is left as it is."""
    config = dict(encoder.get_config(), **rates)
    del config["name"]
    copy = type(encoder).from_config(config)
    copy.set_weights(encoder.get_weights())
    return copy
