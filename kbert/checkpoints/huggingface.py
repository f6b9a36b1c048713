"""Hugging Face BERT folders (`config.json`, `model.safetensors`, `vocab.txt`), read and written.

Tensors are read and written with the `safetensors` package on NumPy arrays,
so no PyTorch is needed. Inside kbert, checkpoint tensors travel as a dict of
NumPy arrays under Hugging Face's `BertModel` names (`"embeddings.word_embeddings.weight"`,
`"encoder.layer.0.attention.self.query.weight"`, ...) with Hugging Face's
layouts (dense kernels as `(out, in)`); the other formats convert to it.
"""

import json
import os

import numpy as np

from kbert.checkpoints.checkpoint_files import (
    CheckpointError,
    boolean,
    check_count_against_tensors,
    check_layer_count,
    check_required,
    check_sizes_against_tensors,
    check_weights_against_tensors,
    number,
    one_of,
    positive_int,
    rate,
    read_json,
    read_safetensors,
    read_safetensors_shapes,
    tensor_as_named,
)
from kbert.io.safe_loading import encoder_weight_count

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCABULARY_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Hugging Face config keys -> kbert.Encoder arguments.
_CONFIG_KEYS = {
    "vocab_size": "vocabulary_size",
    "num_hidden_layers": "num_layers",
    "hidden_size": "hidden_dim",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_dim",
    "max_position_embeddings": "max_sequence_length",
    "type_vocab_size": "num_segments",
}


def encoder_arguments(config, source):
    """`kbert.Encoder` arguments from a BERT config dict: Hugging Face's `config.json`, or Google's `bert_config.json`.

    Google's file has the keys that Hugging Face's BERT config kept
    (`google.encoder_arguments` reads it here).

    Only what kbert's encoder computes is accepted: post-LayerNorm blocks,
    exact GELU, absolute positions, LayerNorm epsilon 1e-12. Each key is
    checked (sizes positive integers, dropout rates in [0, 1), names from
    those kbert computes); a `CheckpointError` names the key and `source`.
    """
    check_required(config, _CONFIG_KEYS, source, "BERT")
    one_of(config, "hidden_act", source, ("gelu",), "gelu")
    one_of(config, "position_embedding_type", source, ("absolute",), "absolute")
    epsilon = number(config, "layer_norm_eps", source, 1e-12)
    if not np.isclose(epsilon, 1e-12, rtol=0, atol=1e-13):
        raise CheckpointError(source, f"layer_norm_eps {epsilon} is not BERT's 1e-12.", key="layer_norm_eps")
    arguments = {ours: positive_int(config, theirs, source) for theirs, ours in _CONFIG_KEYS.items()}
    check_heads(arguments, source)
    arguments["dropout"] = rate(config, "hidden_dropout_prob", source, 0.1)
    arguments["attention_dropout"] = rate(config, "attention_probs_dropout_prob", source, arguments["dropout"])
    return arguments


def check_heads(arguments, source):
    """The attention heads must split the hidden size evenly."""
    if arguments["hidden_dim"] % arguments["num_heads"]:
        raise CheckpointError(
            source, f"num_attention_heads {arguments['num_heads']} does not divide hidden_size "
            f"{arguments['hidden_dim']}.", key="num_attention_heads"
        )


def check_config_against_tensors(arguments, shapes, config_path, weights_path, shown=tensor_as_named):
    """A BERT config's sizes against the tensors that hold them (`{name: shape}`), before an encoder is built.

    Each size must be a tensor's (vocab_size and hidden_size the word
    embeddings', max_position_embeddings the position embeddings', ...),
    every layer must have tensors, and the weights the config implies in
    all must not exceed those the file holds: so an encoder is never
    bigger than its weights file. `shown` names a tensor in an error
    (`check_sizes_against_tensors`).
    """
    check_sizes_against_tensors(config_path, weights_path, [
        ("vocab_size", arguments["vocabulary_size"], "embeddings.word_embeddings.weight", 0),
        ("hidden_size", arguments["hidden_dim"], "embeddings.word_embeddings.weight", 1),
        ("max_position_embeddings", arguments["max_sequence_length"], "embeddings.position_embeddings.weight", 0),
        ("type_vocab_size", arguments["num_segments"], "embeddings.token_type_embeddings.weight", 0),
        ("intermediate_size", arguments["intermediate_dim"], "encoder.layer.0.intermediate.dense.weight", 0),
    ], shapes, shown)
    check_count_against_tensors(config_path, weights_path, "num_hidden_layers", arguments["num_layers"],
                                shapes, r"encoder\.layer\.(\d+)\.")
    check_layer_count(config_path, "num_hidden_layers", arguments["num_layers"])
    sizes = {theirs: arguments[ours] for theirs, ours in _CONFIG_KEYS.items() if theirs != "num_attention_heads"}
    check_weights_against_tensors(config_path, weights_path, _bert_weights, sizes, shapes)


def _bert_weights(sizes):
    return encoder_weight_count(
        sizes["vocab_size"], sizes["num_hidden_layers"], sizes["hidden_size"], sizes["intermediate_size"],
        sizes["max_position_embeddings"], sizes["type_vocab_size"],
    )


def huggingface_config(encoder):
    """The Hugging Face `config.json` dict of a `kbert.Encoder`."""
    config = {theirs: getattr(encoder, ours) for theirs, ours in _CONFIG_KEYS.items()}
    config.update(
        {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "hidden_act": "gelu",
            "hidden_dropout_prob": encoder.dropout,
            "attention_probs_dropout_prob": encoder.attention_dropout,
            "initializer_range": 0.02,
            "layer_norm_eps": 1e-12,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
        }
    )
    return config


def is_huggingface_folder(path):
    return os.path.isdir(path) and os.path.exists(os.path.join(path, CONFIG_FILE)) and (
        os.path.exists(os.path.join(path, WEIGHTS_FILE))
    )


def read_huggingface_folder(folder):
    """Returns `(encoder_arguments, tensors, vocabulary_path, lowercase)` of a Hugging Face folder.

    Anything malformed (a config that does not parse, a key of the wrong
    type, a truncated weights file, a NaN tensor, sizes that disagree with
    the tensors) fails with a `CheckpointError` naming the file and key.
    """
    config_path = os.path.join(folder, CONFIG_FILE)
    config = read_json(config_path)
    one_of(config, "model_type", config_path, ("bert",), "bert")
    arguments = encoder_arguments(config, config_path)
    weights_path = os.path.join(folder, WEIGHTS_FILE)
    # The config is checked against the tensors' shapes (the file's header)
    # before any tensor is read, or an encoder built.
    shapes = current_names(read_safetensors_shapes(weights_path))
    check_config_against_tensors(arguments, shapes, config_path, weights_path)
    tensors = current_names(read_safetensors(weights_path))
    vocabulary_path = os.path.join(folder, VOCABULARY_FILE)
    if not os.path.exists(vocabulary_path):
        raise FileNotFoundError(f"{folder} has no {VOCABULARY_FILE}.")
    lowercase = None
    tokenizer_config_path = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    if os.path.exists(tokenizer_config_path):
        lowercase = boolean(read_json(tokenizer_config_path), "do_lower_case", tokenizer_config_path, None)
    return arguments, tensors, vocabulary_path, lowercase


def current_names(tensors):
    """A dict of tensors (or shapes) under today's `BertModel` names.

    Some exports prefix every name with the model type ("bert.embeddings..."),
    and older ones name LayerNorm's weights `gamma` and `beta`.
    """
    if tensors and all(name.startswith("bert.") or name.startswith("cls.") for name in tensors):
        tensors = {name.removeprefix("bert."): value for name, value in tensors.items()}
    return {_current_name(name): value for name, value in tensors.items()}


def _current_name(name):
    """A tensor's name with LayerNorm's `gamma`/`beta` as today's `weight`/`bias`.

    The original bert-base-* uploads (their `model.safetensors` included)
    still use the older names, which transformers renames as it loads.
    """
    for old, new in ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias")):
        if name.endswith(old):
            return name[: -len(old)] + new
    return name


def write_huggingface_folder(folder, encoder, tensors, vocabulary, lowercase):
    """Writes a Hugging Face BERT folder; `folder` must not exist yet (it is written aside, then renamed)."""
    from safetensors.numpy import save_file

    from kbert.io.atomic_files import write_atomically

    folder = os.fspath(folder)
    if os.path.exists(folder):
        raise FileExistsError(f"{folder} exists already; choose a new folder.")

    def write(staging):
        os.makedirs(staging)
        with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(huggingface_config(encoder), f, indent=2)
        save_file(
            {name: np.ascontiguousarray(value) for name, value in tensors.items()},
            os.path.join(staging, WEIGHTS_FILE),
            metadata={"format": "pt"},  # what transformers checks when it loads the file
        )
        with open(os.path.join(staging, VOCABULARY_FILE), "w", encoding="utf-8") as f:
            f.write("\n".join(vocabulary) + "\n")
        with open(os.path.join(staging, TOKENIZER_CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump({"do_lower_case": bool(lowercase), "tokenizer_class": "BertTokenizer",
                       "model_max_length": encoder.max_sequence_length}, f, indent=2)

    write_atomically(folder, write)
    return folder
