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


def encoder_config_from_huggingface(config, source):
    """`kbert.Encoder` arguments from a Hugging Face (or Google) BERT config dict.

    Only what kbert's encoder computes is accepted: post-LayerNorm blocks,
    exact GELU, absolute positions, LayerNorm epsilon 1e-12.
    """
    missing = [key for key in _CONFIG_KEYS if key not in config]
    if missing:
        raise ValueError(f"{source}: the BERT config lacks {missing}.")
    activation = config.get("hidden_act", "gelu")
    if activation != "gelu":
        raise ValueError(
            f"{source}: hidden_act {activation!r} is not supported; kbert's encoder uses exact "
            "GELU ('gelu')."
        )
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"{source}: position_embedding_type {position_type!r} is not supported.")
    epsilon = config.get("layer_norm_eps", 1e-12)
    if not np.isclose(epsilon, 1e-12, rtol=0, atol=1e-13):
        raise ValueError(f"{source}: layer_norm_eps {epsilon} is not BERT's 1e-12.")
    arguments = {ours: int(config[theirs]) for theirs, ours in _CONFIG_KEYS.items()}
    arguments["dropout"] = float(config.get("hidden_dropout_prob", 0.1))
    arguments["attention_dropout"] = float(config.get("attention_probs_dropout_prob", arguments["dropout"]))
    return arguments


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
    """Returns `(encoder_arguments, tensors, vocabulary_path, lowercase)` of a Hugging Face folder."""
    from safetensors.numpy import load_file

    config_path = os.path.join(folder, CONFIG_FILE)
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    if config.get("model_type", "bert") != "bert":
        raise ValueError(f"{config_path}: model_type {config.get('model_type')!r} is not 'bert'.")
    arguments = encoder_config_from_huggingface(config, config_path)
    tensors = load_file(os.path.join(folder, WEIGHTS_FILE))
    # Some exports prefix every name with the model type ("bert.embeddings...").
    if tensors and all(name.startswith("bert.") or name.startswith("cls.") for name in tensors):
        tensors = {name.removeprefix("bert."): value for name, value in tensors.items()}
    tensors = {_current_name(name): value for name, value in tensors.items()}
    vocabulary_path = os.path.join(folder, VOCABULARY_FILE)
    if not os.path.exists(vocabulary_path):
        raise FileNotFoundError(f"{folder} has no {VOCABULARY_FILE}.")
    lowercase = None
    tokenizer_config_path = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    if os.path.exists(tokenizer_config_path):
        with open(tokenizer_config_path, encoding="utf-8") as f:
            lowercase = json.load(f).get("do_lower_case")
    return arguments, tensors, vocabulary_path, lowercase


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

    from kbert.atomic_files import write_atomically

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
