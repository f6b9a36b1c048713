"""Malformed checkpoints fail as one `CheckpointError` naming the file and the key or tensor, in the API and the CLI."""

import json
import os
import shutil

import keras_hub
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import kbert
from kbert.checkpoints.checkpoint_files import CheckpointError
from kbert.checkpoints.encoder_weights import encoder_tensors
from kbert.checkpoints.huggingface import huggingface_config
from tests.checkpoints.test_loading import write_google_checkpoint
from tests.test_case import TINY_VOCABULARY, cli_refusal, tiny_encoder_kwargs

_DELETE = object()


@pytest.fixture(scope="module")
def saved_bert(tmp_path_factory):
    """A tiny Hugging Face BERT folder with its pretraining heads (so `kbert fill-mask` reads it)."""
    pretrainer = kbert.Pretrainer(kbert.Encoder(**tiny_encoder_kwargs()))
    folder = tmp_path_factory.mktemp("saved") / "bert"
    return kbert.save_pretrained(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), folder)


@pytest.fixture
def bert_folder(saved_bert, tmp_path):
    """A fresh copy of the tiny folder, for a test to damage."""
    return shutil.copytree(saved_bert, tmp_path / "bert")


def edit_config(folder, name="config.json", **changes):
    path = os.path.join(folder, name)
    with open(path) as f:
        config = json.load(f)
    for key, value in changes.items():
        if value is _DELETE:
            del config[key]
        else:
            config[key] = value
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def edit_tensors(folder, edit):
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path)
    return path


def load_error(folder):
    with pytest.raises(CheckpointError) as error:
        kbert.load_pretrained(str(folder))
    assert "\n" not in str(error.value)
    return error.value


# Through the CLI, where a user meets them.
def test_cli_names_a_truncated_weights_file(bert_folder, capsys):
    weights = os.path.join(bert_folder, "model.safetensors")
    with open(weights, "rb") as f:
        data = f.read()
    with open(weights, "wb") as f:
        f.write(data[: len(data) // 2])
    message = cli_refusal(capsys, "fill-mask", str(bert_folder), "the [MASK] sat")
    assert message.startswith(f"{weights}: not a readable safetensors file")


def test_cli_names_the_config_key_that_is_not_a_number(bert_folder, tmp_path, capsys):
    config = edit_config(bert_folder, num_hidden_layers="two")
    message = cli_refusal(capsys, "train", "sst2", "--encoder", str(bert_folder), "--out", str(tmp_path / "run"))
    assert message == f"{config}: num_hidden_layers must be a positive integer, found 'two'."
    assert not (tmp_path / "run").exists()


def test_cli_refuses_a_tensor_of_nan(bert_folder, capsys):
    def poison(tensors):
        tensors["encoder.layer.1.attention.self.key.weight"][0, :3] = np.nan

    weights = edit_tensors(bert_folder, poison)
    message = cli_refusal(capsys, "fill-mask", str(bert_folder), "the [MASK] sat")
    assert message.startswith(f"{weights}: tensor encoder.layer.1.attention.self.key.weight")
    assert "3 of 256 values NaN or infinite" in message


# Config files (Hugging Face config.json, tokenizer_config.json): every key checked.
@pytest.mark.parametrize("key, value, message", [
    ("num_hidden_layers", "two", "num_hidden_layers must be a positive integer, found 'two'"),
    ("hidden_size", -16, "hidden_size must be a positive integer, found -16"),
    ("num_attention_heads", 0, "num_attention_heads must be a positive integer, found 0"),
    ("vocab_size", 27.5, "vocab_size must be a positive integer, found 27.5"),
    ("type_vocab_size", True, "type_vocab_size must be a positive integer, found True"),
    ("intermediate_size", None, "intermediate_size must be a positive integer, found None"),
    ("max_position_embeddings", [32], "max_position_embeddings must be a positive integer, found [32]"),
    ("hidden_dropout_prob", 1.5, "hidden_dropout_prob must be a number from 0 to below 1, found 1.5"),
    ("attention_probs_dropout_prob", "0.1", "attention_probs_dropout_prob must be a number from 0 to below 1"),
    ("hidden_act", "relu", "hidden_act 'relu' is not supported; kbert reads 'gelu'"),
    ("position_embedding_type", "relative_key", "position_embedding_type 'relative_key' is not supported"),
    ("layer_norm_eps", "small", "layer_norm_eps must be a number, found 'small'"),
    ("layer_norm_eps", 1e-5, "layer_norm_eps 1e-05 is not BERT's 1e-12"),
    ("model_type", "roberta", "model_type 'roberta' is not supported; kbert reads 'bert'"),
    ("num_attention_heads", 3, "num_attention_heads 3 does not divide hidden_size 16"),
    ("vocab_size", _DELETE, "the BERT config lacks vocab_size"),
])
def test_each_config_key_is_checked(bert_folder, key, value, message):
    path = edit_config(bert_folder, **{key: value})
    error = load_error(bert_folder)
    assert (error.path, error.key) == (path, key)
    assert str(error).startswith(f"{path}: {message}")


def test_config_sizes_are_checked_against_the_tensors_before_building(bert_folder):
    config = edit_config(bert_folder, hidden_size=32)
    error = load_error(bert_folder)
    weights = os.path.join(bert_folder, "model.safetensors")
    assert str(error) == (f"{config}: hidden_size is 32, but {weights} holds embeddings.word_embeddings.weight "
                          "of shape (27, 16); the config and the weights disagree.")
    # A huge count is refused before an encoder of that size is built.
    edit_config(bert_folder, hidden_size=16, num_hidden_layers=100_000)
    assert str(load_error(bert_folder)).startswith(f"{config}: num_hidden_layers is 100000, but {weights} "
                                                   "holds tensors for 2")


@pytest.mark.parametrize("text, line, message", [
    ('{\n  "vocab_size": 27,\n  oops\n}', 3, "not valid JSON: Expecting property name"),
    ("", 1, "not valid JSON: Expecting value"),
    ("[1, 2]", None, "expected a JSON object ({...}), found a JSON list"),
    (b'{\n"hidden_act": "g\xffelu"}', 2, "invalid UTF-8 at byte 18"),
])
def test_a_config_that_is_no_json_object_names_the_file_and_line(bert_folder, text, line, message):
    path = os.path.join(bert_folder, "config.json")
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    error = load_error(bert_folder)
    assert (error.path, error.line_number) == (path, line)
    where = path if line is None else f"{path}, line {line}"
    assert str(error).startswith(f"{where}: {message}")


def test_tokenizer_config_keys_are_checked(bert_folder):
    path = edit_config(bert_folder, "tokenizer_config.json", do_lower_case="false")
    error = load_error(bert_folder)
    assert (error.path, error.key) == (path, "do_lower_case")
    assert str(error) == f"{path}: do_lower_case must be true or false, found 'false'."


def test_a_vocabulary_of_another_size_names_the_file(bert_folder):
    path = os.path.join(bert_folder, "vocab.txt")
    with open(path, "a") as f:
        f.write("extra\n")
    error = load_error(bert_folder)
    assert (error.path, error.key) == (path, "vocab_size")
    assert str(error) == f"{path}: the vocabulary has 28 tokens but the model embeds 27 (vocab_size)."


# Weights files.
@pytest.mark.parametrize("damage", ["half", "header", "empty", "garbage"])
def test_a_damaged_safetensors_file_names_the_file(bert_folder, damage):
    path = os.path.join(bert_folder, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    data = {"half": data[: len(data) // 2], "header": data[:5], "empty": b"",
            "garbage": b"\x10" + bytes(7) + b"{not json}" + bytes(20)}[damage]
    with open(path, "wb") as f:
        f.write(data)
    error = load_error(bert_folder)
    assert error.path == path
    assert str(error).startswith(f"{path}: not a readable safetensors file (truncated or damaged?): ")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_tensors_are_refused_naming_the_tensor(bert_folder, value):
    def poison(tensors):
        tensors["cls.predictions.bias"][5] = value  # a head tensor: refused even when only the encoder is loaded

    path = edit_tensors(bert_folder, poison)
    error = load_error(bert_folder)
    assert (error.path, error.key) == (path, "cls.predictions.bias")
    assert str(error) == (f"{path}: tensor cls.predictions.bias (27,) has 1 of 27 values NaN or infinite; "
                          "the checkpoint is damaged.")


def test_wrong_shapes_and_types_name_the_file_the_tensor_and_both_shapes_on_one_line(bert_folder):
    def edit(tensors):
        tensors["encoder.layer.1.intermediate.dense.weight"] = np.zeros((31, 16), "float32")
        tensors["pooler.dense.bias"] = tensors["pooler.dense.bias"].astype("int32")

    path = edit_tensors(bert_folder, edit)
    error = load_error(bert_folder)
    assert (error.path, error.key) == (path, "encoder.layer.1.intermediate.dense.weight")
    assert str(error) == (
        f"{path}: does not fit the encoder: encoder.layer.1.intermediate.dense.weight has shape (31, 16); "
        "transformer_layer_1/feedforward_intermediate_dense/kernel has (16, 32); pooler.dense.bias has dtype "
        "int32; pooler_dense/bias needs floating point."
    )


def test_wrong_head_shapes_name_the_file(bert_folder, capsys):
    def edit(tensors):
        tensors["cls.seq_relationship.weight"] = np.zeros((3, 16), "float32")

    path = edit_tensors(bert_folder, edit)
    message = cli_refusal(capsys, "fill-mask", str(bert_folder), "the [MASK] sat")
    assert message == (f"{path}: the pretraining heads do not fit: "
                       "cls.seq_relationship.weight has shape (3, 16); next_sentence_head/kernel has (16, 2).")


# Google's TF checkpoints.
@pytest.fixture
def google_folder(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, encoder_tensors(encoder), huggingface_config(encoder), TINY_VOCABULARY)
    return folder


def test_google_config_keys_are_checked(google_folder):
    path = edit_config(google_folder, "bert_config.json", num_hidden_layers="two")
    error = load_error(google_folder)
    assert (error.path, error.key) == (path, "num_hidden_layers")
    with open(path, "w") as f:
        f.write("{\n}}")
    assert str(load_error(google_folder)).startswith(f"{path}, line 2: not valid JSON")


def test_a_truncated_google_checkpoint_names_the_file(google_folder):
    data = os.path.join(google_folder, "bert_model.ckpt.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    error = load_error(google_folder)
    prefix = os.path.join(google_folder, "bert_model.ckpt")
    assert str(error).startswith(f"{prefix}: not a readable TensorFlow checkpoint (truncated or damaged?): reading ")


def test_a_google_checkpoint_with_nan_is_refused(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    tensors = encoder_tensors(encoder)
    tensors["embeddings.LayerNorm.weight"][:] = np.nan
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, tensors, huggingface_config(encoder), TINY_VOCABULARY)
    error = load_error(folder)
    assert (error.path, error.key) == (os.path.join(folder, "bert_model.ckpt"), "bert/embeddings/LayerNorm/gamma")


# keras-hub presets saved on disk.
@pytest.fixture
def preset_folder(tmp_path):
    kwargs = tiny_encoder_kwargs()
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=kwargs["vocabulary_size"], num_layers=kwargs["num_layers"], num_heads=kwargs["num_heads"],
        hidden_dim=kwargs["hidden_dim"], intermediate_dim=kwargs["intermediate_dim"],
        max_sequence_length=kwargs["max_sequence_length"],
    )
    folder = str(tmp_path / "preset")
    backbone.save_to_preset(folder)
    keras_hub.tokenizers.BertTokenizer(vocabulary=TINY_VOCABULARY, lowercase=True).save_to_preset(folder)
    return folder


def edit_serialized(folder, name, **changes):
    path = os.path.join(folder, name)
    with open(path) as f:
        serialized = json.load(f)
    for key, value in changes.items():
        if key in ("class_name", "module", "registered_name"):
            serialized[key] = value
        else:
            serialized["config"][key] = value
    with open(path, "w") as f:
        json.dump(serialized, f)
    return path


def test_cli_refuses_a_keras_hub_tokenizer_that_names_a_path(preset_folder, tmp_path, capsys):
    path = edit_serialized(preset_folder, "tokenizer.json", vocabulary="/etc/hostname")
    message = cli_refusal(capsys, "train", "sst2", "--encoder", preset_folder, "--out", str(tmp_path / "run"))
    assert message.startswith(f"{path}: vocabulary is '/etc/hostname'; kbert reads a "
                              "keras-hub preset's tokenizer from the preset's own assets")


@pytest.mark.parametrize("file_name, changes, key", [
    ("tokenizer.json", {"config_file": "../elsewhere/tokenizer.json"}, "config_file"),
    ("tokenizer.json", {"vocabulary": 7}, "vocabulary"),
    ("tokenizer.json", {"class_name": "StringLookup", "module": "keras.layers", "registered_name": None},
     "class_name"),
    ("config.json", {"num_layers": "two"}, "num_layers"),
    ("config.json", {"hidden_dim": 0}, "hidden_dim"),
    ("config.json", {"dropout": 2}, "dropout"),
    ("config.json", {"class_name": "GPT2Backbone"}, "class_name"),
])
def test_keras_hub_preset_configs_are_checked(preset_folder, file_name, changes, key):
    path = edit_serialized(preset_folder, file_name, **changes)
    error = load_error(preset_folder)
    assert (error.path, error.key) == (path, key)


def test_keras_hub_preset_weights_that_are_truncated_or_nan_are_named(preset_folder):
    weights = os.path.join(preset_folder, "model.weights.h5")
    with open(weights, "rb") as f:
        data = f.read()
    with open(weights, "wb") as f:
        f.write(data[: len(data) // 2])
    # Refused by kbert's count of the weights, before keras-hub builds the backbone.
    assert str(load_error(preset_folder)).startswith(f"{weights}: not a readable HDF5 file (truncated or damaged?): ")

    backbone = keras_hub.models.BertBackbone.from_preset(preset_folder, load_weights=False)
    backbone.get_layer("token_embedding").embeddings.assign(np.full((27, 16), np.nan, "float32"))
    backbone.save_weights(weights)
    error = load_error(preset_folder)
    assert error.path == weights and "token_embedding" in error.key
