"""kbert's encoder and tokenizer to and from keras-hub's (and keras-nlp's) BERT and ALBERT.

`BertBackbone` and `BertTokenizer` for BERT, `AlbertBackbone` and
`AlbertTokenizer` for ALBERT. The encoders' weights are matched by path and
shape (`kbert.models.keras_hub_encoders` says how); keras-hub's
`BertBackbone` computes GELU's tanh approximation, kbert the exact GELU, so
with the same weights their outputs differ by about 1e-5 to 1e-4. keras-nlp
0.32 is an alias of keras-hub 0.32: its classes are the same objects.

`check_keras_hub_preset` reads a preset folder's configs before keras-hub
does, so that a malformed one fails with kbert's one-line
`CheckpointError` naming the file and key, not Keras' generic "could not be
deserialized properly".
"""

import os

from kbert.checkpoints.checkpoint_files import (
    CheckpointError,
    check_layer_count,
    check_weights_against_tensors,
    positive_int,
    rate,
    read_json,
    shown_value,
)
from kbert.io.safe_loading import claim_keys, encoder_claim
from kbert.io.weights_file_sizes import h5_weight_count
from kbert.models.encoder import Encoder
from kbert.models.keras_hub_encoders import backbone_from_encoder, encoder_from_backbone

BACKBONE_CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer.json"
METADATA_FILE = "metadata.json"
WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
# Each backbone kbert reads: its tokenizer, the config keys that are sizes,
# and the tokenizer config key that may only hold data (a path there would
# make keras-hub read a file outside the preset).
_BACKBONES = {
    "BertBackbone": ("BertTokenizer", ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                                       "intermediate_dim", "max_sequence_length", "num_segments"), "vocabulary"),
    "AlbertBackbone": ("AlbertTokenizer", ("vocabulary_size", "num_layers", "num_heads", "num_groups",
                                           "num_inner_repetitions", "embedding_dim", "hidden_dim",
                                           "intermediate_dim", "max_sequence_length", "num_segments"), "proto"),
}


def check_keras_hub_preset(folder):
    """Checks a keras-hub BERT or ALBERT preset folder's configs; returns the backbone's class name.

    Read are `config.json` and `tokenizer.json`, before keras-hub reads them.

    The backbone must be a `BertBackbone` or `AlbertBackbone` whose sizes
    are positive integers and dropout a rate; the tokenizer must be the
    backbone's own, with its vocabulary (or SentencePiece model) in the
    preset's assets: a config that names a path (`"vocabulary":
    "/etc/passwd"`, a `config_file` elsewhere) is refused. Any fault is a
    `CheckpointError` naming the file and key.
    """
    config_path = os.path.join(folder, BACKBONE_CONFIG_FILE)
    backbone = read_json(config_path)
    class_name = _class_name(backbone, config_path, tuple(_BACKBONES))
    tokenizer_class, sizes, data_key = _BACKBONES[class_name]
    config = _inner_config(backbone, config_path)
    for key in sizes:
        if key in config:
            positive_int(config, key, config_path)
    rate(config, "dropout", config_path, 0.0)
    metadata_path = os.path.join(folder, METADATA_FILE)
    if os.path.exists(metadata_path):
        read_json(metadata_path)  # keras-hub parses it too: its size and nesting are checked
    _check_weights_claimed(folder, backbone, config_path)

    tokenizer_path = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    if not os.path.exists(tokenizer_path):
        raise FileNotFoundError(f"{folder} has no {TOKENIZER_CONFIG_FILE} (the keras-hub preset's tokenizer).")
    tokenizer = read_json(tokenizer_path)
    _class_name(tokenizer, tokenizer_path, (tokenizer_class,))
    config = _inner_config(tokenizer, tokenizer_path)
    value = config.get(data_key)
    if data_key == "vocabulary" and isinstance(value, list) and all(isinstance(token, str) for token in value):
        pass  # the tokens themselves
    elif value is not None:
        raise CheckpointError(
            tokenizer_path, f"{data_key} is {shown_value(value)}; kbert reads a keras-hub preset's tokenizer from the "
            f"preset's own assets ({data_key} null), never from a path the config names.", key=data_key
        )
    if config.get("config_file", TOKENIZER_CONFIG_FILE) != TOKENIZER_CONFIG_FILE:
        raise CheckpointError(
            tokenizer_path, f"config_file is {config['config_file']!r}, not {TOKENIZER_CONFIG_FILE!r}; it "
            "would make keras-hub read the tokenizer's assets from another folder.", key="config_file"
        )
    return class_name


def _check_weights_claimed(folder, backbone, config_path):
    """The backbone's sizes against the weights file's, before keras-hub builds a backbone of those sizes.

    The weights are counted from the shapes the HDF5 file declares (no data
    is read), which must fit in the file: a config of 20,000,000 tokens or
    100,000 layers beside a small weights file is refused.
    """
    claim = encoder_claim(backbone)
    if claim is None:
        return
    sizes, count = claim
    check_layer_count(config_path, "num_layers", sizes["num_layers"], sizes["num_inner_repetitions"])
    files = preset_weight_files(folder)
    held = 0
    for path in files:
        with open(path, "rb") as file:
            held += h5_weight_count(file, os.path.getsize(path),
                                    lambda problem, path=path: CheckpointError(path, problem))
    weights = files[0] if len(files) == 1 else os.path.join(folder, SHARDED_WEIGHTS_FILE)
    check_weights_against_tensors(config_path, weights, count, sizes, held=held, keys=claim_keys(sizes))


def preset_weight_files(folder):
    """The HDF5 files of a preset's weights: `model.weights.h5`, or the shards `model.weights.json` names.

    A shard must be a file of the preset's folder: a name with a path in it
    is refused, as it would make Keras read a file elsewhere.
    """
    single = os.path.join(folder, WEIGHTS_FILE)
    if os.path.exists(single):
        return [single]
    sharded = os.path.join(folder, SHARDED_WEIGHTS_FILE)
    if not os.path.exists(sharded):
        raise FileNotFoundError(f"{folder} has no {WEIGHTS_FILE} (the keras-hub preset's weights).")
    weight_map = read_json(sharded).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(sharded, f"weight_map must be a JSON object, found {shown_value(weight_map)}.",
                              key="weight_map")
    names = set()
    for value in weight_map.values():
        for name in value if isinstance(value, list) else [value]:
            if (not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", "..")
                    or not os.path.isfile(os.path.join(folder, name))):
                raise CheckpointError(sharded, f"weight_map names {shown_value(name)}, which is no file of the "
                                      "preset's folder.", key="weight_map")
            names.add(name)
    return [os.path.join(folder, name) for name in sorted(names)]


def _class_name(serialized, path, expected):
    class_name = serialized.get("class_name")
    registered = serialized.get("registered_name")
    module = serialized.get("module", "keras_hub")
    if (class_name not in expected or not isinstance(module, str)
            or not module.startswith(("keras_hub", "keras_nlp"))
            or registered not in (None, f"keras_hub>{class_name}", f"keras_nlp>{class_name}")):
        raise CheckpointError(
            path, f"class_name {class_name!r} (module {module!r}) is not keras-hub's "
            f"{' or '.join(expected)}; kbert reads BERT and ALBERT presets only.", key="class_name"
        )
    return class_name


def _inner_config(serialized, path):
    config = serialized.get("config")
    if not isinstance(config, dict):
        raise CheckpointError(path, f"config must be a JSON object, found {config!r}.", key="config")
    return config


def encoder_from_keras_hub(backbone, dropout=None, dtype=None, attention_dropout=None):
    """A `kbert.Encoder` with the weights of a keras-hub (or keras-nlp) `BertBackbone` or `AlbertBackbone`.

    The same as `kbert.Encoder.from_keras_hub` (see there).
    """
    return encoder_from_backbone(Encoder, backbone, dropout=dropout, dtype=dtype,
                                 attention_dropout=attention_dropout)


def encoder_to_keras_hub(encoder):
    """A keras-hub `BertBackbone` (or `AlbertBackbone`) with a `kbert.Encoder`'s shape, dropout, dtype and weights.

    The same as `kbert.Encoder.to_keras_hub` (see there).
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"Expected a kbert.Encoder, got {type(encoder).__name__}.")
    return backbone_from_encoder(encoder)


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
