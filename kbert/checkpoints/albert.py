"""Hugging Face ALBERT folders (`config.json`, `model.safetensors`, `spiece.model`), read and written.

ALBERT's tensors are named as in Hugging Face's `AlbertModel`
(`"embeddings.word_embeddings.weight"`, `"encoder.embedding_hidden_mapping_in.weight"`,
`"encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight"`,
`"pooler.weight"`, ...), optionally under an `"albert."` prefix, with the
masked-LM head as `"predictions.*"` and the sentence-order head as
`"sop_classifier.*"`. Layouts are Hugging Face's (dense kernels `(out, in)`);
`encoder_weights` does the transposing and reshaping.

A kbert encoder's layer blocks map to ALBERT's groups: with sharing, block
`transformer_group_{g}_layer_{k}` is group g's layer k; without,
`transformer_layer_{i}` is group i's only layer.
"""

import json
import os
import re

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
)
from kbert.checkpoints.encoder_weights import (
    encoder_tensors,
    head_tensors,
    set_encoder_tensors,
    set_head_tensors,
)
from kbert.checkpoints.huggingface import check_heads
from kbert.io.safe_loading import encoder_weight_count

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SENTENCE_PIECE_FILE = "spiece.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Hugging Face config keys -> kbert.Encoder arguments.
_CONFIG_KEYS = {
    "vocab_size": "vocabulary_size",
    "embedding_size": "embedding_size",
    "hidden_size": "hidden_dim",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_dim",
    "max_position_embeddings": "max_sequence_length",
    "type_vocab_size": "num_segments",
    "num_hidden_groups": "num_groups",
    "inner_group_num": "num_inner_repetitions",
}
# Hugging Face's activation names -> kbert.Encoder's.
_ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu"}

_EMBEDDINGS = {
    "token_embedding/embeddings": "embeddings.word_embeddings.weight",
    "position_embedding/embeddings": "embeddings.position_embeddings.weight",
    "segment_embedding/embeddings": "embeddings.token_type_embeddings.weight",
    "embeddings_layer_norm/gamma": "embeddings.LayerNorm.weight",
    "embeddings_layer_norm/beta": "embeddings.LayerNorm.bias",
    "embedding_projection/kernel": "encoder.embedding_hidden_mapping_in.weight",
    "embedding_projection/bias": "encoder.embedding_hidden_mapping_in.bias",
    "pooler_dense/kernel": "pooler.weight",
    "pooler_dense/bias": "pooler.bias",
}
_LAYER = {
    "self_attention_layer/query": "attention.query",
    "self_attention_layer/key": "attention.key",
    "self_attention_layer/value": "attention.value",
    "self_attention_layer/attention_output": "attention.dense",
    "self_attention_layer_norm": "attention.LayerNorm",
    "feedforward_intermediate_dense": "ffn",
    "feedforward_output_dense": "ffn_output",
    "feedforward_layer_norm": "full_layer_layer_norm",
}
_SUFFIX = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
PROJECTION_KERNEL = _EMBEDDINGS["embedding_projection/kernel"]
PROJECTION_BIAS = _EMBEDDINGS["embedding_projection/bias"]

# The pretraining heads: kbert.Pretrainer variable path -> checkpoint name.
HEADS = {
    "masked_lm_head/intermediate_dense/kernel": "predictions.dense.weight",
    "masked_lm_head/intermediate_dense/bias": "predictions.dense.bias",
    "masked_lm_head/intermediate_layer_norm/gamma": "predictions.LayerNorm.weight",
    "masked_lm_head/intermediate_layer_norm/beta": "predictions.LayerNorm.bias",
    "masked_lm_head/output_bias": "predictions.bias",
    "sentence_order_head/kernel": "sop_classifier.classifier.weight",
    "sentence_order_head/bias": "sop_classifier.classifier.bias",
}
MASKED_LM_TENSOR = HEADS["masked_lm_head/output_bias"]
SENTENCE_ORDER_TENSOR = HEADS["sentence_order_head/kernel"]
_PREFIX = "albert."
# Tensors a checkpoint may hold that the encoder does not use: the heads
# (read separately), the tied decoder and position ids.
_EXTRA = re.compile(r"^(predictions\.|sop_classifier\.|embeddings\.position_ids$)")


def checkpoint_name(variable_path):
    """The ALBERT checkpoint tensor name of an encoder variable path."""
    if variable_path in _EMBEDDINGS:
        return _EMBEDDINGS[variable_path]
    match = re.fullmatch(
        r"transformer_(?:layer_(\d+)|group_(\d+)_layer_(\d+))/(.+)/(kernel|bias|gamma|beta)",
        variable_path,
    )
    if match and match.group(4) in _LAYER:
        layer, group, inner, part, kind = match.groups()
        group, inner = (layer, 0) if layer is not None else (group, inner)
        return f"encoder.albert_layer_groups.{group}.albert_layers.{inner}.{_LAYER[part]}.{_SUFFIX[kind]}"
    raise KeyError(f"No ALBERT checkpoint name for the encoder variable {variable_path!r}.")


def encoder_config_from_albert(config, source):
    """`kbert.Encoder` arguments from a Hugging Face ALBERT config dict; a `CheckpointError` names a bad key."""
    check_required(config, _CONFIG_KEYS, source, "ALBERT")
    activation = one_of(config, "hidden_act", source, tuple(_ACTIVATIONS), "gelu_new")
    one_of(config, "position_embedding_type", source, ("absolute",), "absolute")
    epsilon = number(config, "layer_norm_eps", source, 1e-12)
    if not np.isclose(epsilon, 1e-12, rtol=0, atol=1e-13):
        raise CheckpointError(source, f"layer_norm_eps {epsilon} is not ALBERT's 1e-12.", key="layer_norm_eps")
    arguments = {ours: positive_int(config, theirs, source) for theirs, ours in _CONFIG_KEYS.items()}
    if arguments["num_layers"] % arguments["num_groups"]:
        raise CheckpointError(
            source, f"num_hidden_groups {arguments['num_groups']} does not divide "
            f"num_hidden_layers {arguments['num_layers']}.", key="num_hidden_groups"
        )
    check_heads(arguments, source)
    arguments["activation"] = _ACTIVATIONS[activation]
    arguments["dropout"] = rate(config, "hidden_dropout_prob", source, 0.0)
    arguments["attention_dropout"] = rate(config, "attention_probs_dropout_prob", source, arguments["dropout"])
    return arguments


def check_config_against_tensors(arguments, shapes, config_path, weights_path):
    """An ALBERT config's sizes against the tensors that hold them (`{name: shape}`), before an encoder is built.

    As for BERT (`huggingface.check_config_against_tensors`); the layer
    count, which shared layers hold in no tensor, is bounded by `MAX_LAYERS`.
    """
    check_sizes_against_tensors(config_path, weights_path, [
        ("vocab_size", arguments["vocabulary_size"], "embeddings.word_embeddings.weight", 0),
        ("embedding_size", arguments["embedding_size"], "embeddings.word_embeddings.weight", 1),
        ("max_position_embeddings", arguments["max_sequence_length"], "embeddings.position_embeddings.weight", 0),
        ("type_vocab_size", arguments["num_segments"], "embeddings.token_type_embeddings.weight", 0),
        ("hidden_size", arguments["hidden_dim"], PROJECTION_KERNEL, 0),
        ("intermediate_size", arguments["intermediate_dim"],
         "encoder.albert_layer_groups.0.albert_layers.0.ffn.weight", 0),
    ], shapes)
    check_count_against_tensors(config_path, weights_path, "num_hidden_groups", arguments["num_groups"],
                                shapes, r"encoder\.albert_layer_groups\.(\d+)\.")
    check_count_against_tensors(config_path, weights_path, "inner_group_num", arguments["num_inner_repetitions"],
                                shapes, r"encoder\.albert_layer_groups\.0\.albert_layers\.(\d+)\.")
    check_layer_count(config_path, "num_hidden_layers", arguments["num_layers"], arguments["num_inner_repetitions"])
    sizes = {theirs: arguments[ours] for theirs, ours in _CONFIG_KEYS.items() if theirs != "num_attention_heads"}
    check_weights_against_tensors(config_path, weights_path, _albert_weights, sizes, shapes)


def _albert_weights(sizes):
    return encoder_weight_count(
        sizes["vocab_size"], sizes["num_hidden_layers"], sizes["hidden_size"], sizes["intermediate_size"],
        sizes["max_position_embeddings"], sizes["type_vocab_size"], sizes["embedding_size"],
        sizes["num_hidden_groups"], sizes["inner_group_num"], shared=True,
    )


def albert_config(encoder):
    """The Hugging Face `config.json` dict of a `kbert.Encoder` in ALBERT's format."""
    config = {theirs: getattr(encoder, ours) for theirs, ours in _CONFIG_KEYS.items()}
    config.update(
        {
            "architectures": ["AlbertModel"],
            "model_type": "albert",
            "hidden_act": "gelu_new" if encoder.activation == "gelu_approximate" else "gelu",
            "hidden_dropout_prob": encoder.dropout,
            "attention_probs_dropout_prob": encoder.attention_dropout,
            "classifier_dropout_prob": 0.1,
            "initializer_range": 0.02,
            "layer_norm_eps": 1e-12,
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 3,
            "position_embedding_type": "absolute",
        }
    )
    return config


def read_config(folder):
    return read_json(os.path.join(folder, CONFIG_FILE))


def read_albert_folder(folder):
    """Returns `(encoder_arguments, tensors, sentence_piece_path, tokenizer_options)` of an ALBERT folder.

    Tensor names lose their `"albert."` prefix. `tokenizer_options` holds
    `lowercase` and `strip_accents` from `tokenizer_config.json`
    (`do_lower_case`, `keep_accents`; ALBERT's defaults without it).
    Anything malformed fails with a `CheckpointError` naming the file and key.
    """
    config_path = os.path.join(folder, CONFIG_FILE)
    config = read_config(folder)
    one_of(config, "model_type", config_path, ("albert",), None)
    arguments = encoder_config_from_albert(config, config_path)
    weights_path = os.path.join(folder, WEIGHTS_FILE)
    # The config is checked against the tensors' shapes (the file's header)
    # before any tensor is read, or an encoder built.
    shapes = {name.removeprefix(_PREFIX): shape for name, shape in read_safetensors_shapes(weights_path).items()}
    check_config_against_tensors(arguments, shapes, config_path, weights_path)
    tensors = read_safetensors(weights_path)
    tensors = {name.removeprefix(_PREFIX): value for name, value in tensors.items()}
    sentence_piece_path = os.path.join(folder, SENTENCE_PIECE_FILE)
    if not os.path.exists(sentence_piece_path):
        raise FileNotFoundError(f"{folder} has no {SENTENCE_PIECE_FILE} (ALBERT's SentencePiece model).")
    options = {"lowercase": True, "strip_accents": True}
    tokenizer_config_path = os.path.join(folder, TOKENIZER_CONFIG_FILE)
    if os.path.exists(tokenizer_config_path):
        tokenizer_config = read_json(tokenizer_config_path)
        options["lowercase"] = boolean(tokenizer_config, "do_lower_case", tokenizer_config_path, True)
        options["strip_accents"] = not boolean(tokenizer_config, "keep_accents", tokenizer_config_path, False)
        if not boolean(tokenizer_config, "remove_space", tokenizer_config_path, True):
            raise CheckpointError(
                tokenizer_config_path, "remove_space false is not supported; kbert's "
                "SentencePieceTokenizer collapses whitespace as ALBERT does.", key="remove_space"
            )
    return arguments, tensors, sentence_piece_path, options


def _without_identity_projection(arguments, tensors, source):
    """With E = H kbert's encoder has no projection: the checkpoint's must be the identity."""
    if arguments["embedding_size"] != arguments["hidden_dim"]:
        return tensors
    kernel, bias = tensors.get(PROJECTION_KERNEL), tensors.get(PROJECTION_BIAS)
    size = arguments["hidden_dim"]
    if kernel is not None and (
        kernel.shape != (size, size) or not np.allclose(kernel, np.eye(size), atol=1e-6)
        or bias is None or not np.allclose(bias, 0, atol=1e-6)
    ):
        raise ValueError(
            f"{source}: embedding_size equals hidden_size ({size}), but {PROJECTION_KERNEL} is no "
            "identity; kbert's encoder has no projection when E = H."
        )
    return {name: value for name, value in tensors.items() if name not in (PROJECTION_KERNEL, PROJECTION_BIAS)}


def load_albert_tensors(encoder, arguments, tensors, source):
    """Assigns an ALBERT checkpoint's tensors to a `kbert.Encoder` built from its config."""
    tensors = _without_identity_projection(arguments, tensors, source)
    set_encoder_tensors(encoder, tensors, source, name_of=checkpoint_name, is_extra=_EXTRA.match)


def set_albert_head_tensors(pretrainer, tensors, source):
    """Assigns an ALBERT checkpoint's heads (`predictions.*`, `sop_classifier.*`) to a `kbert.Pretrainer`."""
    set_head_tensors(pretrainer, tensors, source, names=HEADS)


def albert_tensors(model, encoder):
    """An encoder's (and a Pretrainer's heads') weights under ALBERT's names."""
    tensors = encoder_tensors(encoder, name_of=checkpoint_name)
    if encoder.embedding_size == encoder.hidden_dim:
        tensors[PROJECTION_KERNEL] = np.eye(encoder.hidden_dim, dtype="float32")
        tensors[PROJECTION_BIAS] = np.zeros(encoder.hidden_dim, "float32")
    if model is not encoder:
        # Hugging Face's AlbertForPreTraining names: the encoder under "albert.".
        tensors = {_PREFIX + name: value for name, value in tensors.items()}
        tensors.update(head_tensors(model, names=HEADS))
        # The decoder is tied to the token embedding; transformers reads it anyway.
        tensors["predictions.decoder.weight"] = tensors[_PREFIX + _EMBEDDINGS["token_embedding/embeddings"]]
        tensors["predictions.decoder.bias"] = tensors[MASKED_LM_TENSOR]
    return tensors


def write_albert_folder(folder, encoder, tensors, tokenizer):
    """Writes a Hugging Face ALBERT folder; `folder` must not exist yet (written aside, then renamed)."""
    from safetensors.numpy import save_file

    from kbert.io.atomic_files import write_atomically

    folder = os.fspath(folder)
    if os.path.exists(folder):
        raise FileExistsError(f"{folder} exists already; choose a new folder.")

    def write(staging):
        os.makedirs(staging)
        with open(os.path.join(staging, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(albert_config(encoder), f, indent=2)
        save_file(
            {name: np.ascontiguousarray(value) for name, value in tensors.items()},
            os.path.join(staging, WEIGHTS_FILE),
            metadata={"format": "pt"},
        )
        with open(os.path.join(staging, SENTENCE_PIECE_FILE), "wb") as f:
            f.write(tokenizer.proto)
        with open(os.path.join(staging, TOKENIZER_CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump({"do_lower_case": tokenizer.lowercase, "keep_accents": not tokenizer.strip_accents,
                       "remove_space": True, "tokenizer_class": "AlbertTokenizer",
                       "model_max_length": encoder.max_sequence_length}, f, indent=2)

    write_atomically(folder, write)
    return folder
