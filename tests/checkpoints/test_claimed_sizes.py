"""Sizes a checkpoint's config declares are checked against its weights before an encoder is built.

A config that claims 100,000 layers or 20,000,000 positions beside a small
weights file is refused in a second, with one line naming the file and the
key, instead of allocating gigabytes (or building for minutes) first.
"""

import json
import os
import time

import keras_hub
import numpy as np
import pytest
from safetensors.numpy import save_file

import kbert
from kbert.checkpoints.checkpoint_files import CheckpointError
from kbert.checkpoints.encoder_weights import encoder_tensors
from kbert.checkpoints.huggingface import huggingface_config
from kbert.io.safe_loading import MAX_LAYERS
from kbert.io.text_files import MAX_JSON_DEPTH
from tests.checkpoints.test_checkpoint_files import edit_config, edit_serialized, edit_tensors, load_error
from tests.checkpoints.test_loading import write_google_checkpoint
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

# The most a refusal may take: it reads configs and a weights file's header, and builds nothing.
FAST = 5


@pytest.fixture(scope="module")
def saved_bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "bert"
    return kbert.save_pretrained(kbert.Encoder(**tiny_encoder_kwargs()), kbert.Tokenizer(TINY_VOCABULARY), folder)


@pytest.fixture
def bert_folder(saved_bert, tmp_path):
    import shutil

    return shutil.copytree(saved_bert, tmp_path / "bert")


def refusal(folder):
    """The one-line `CheckpointError` of loading `folder`, which must come fast."""
    start = time.monotonic()
    error = load_error(folder)
    assert time.monotonic() - start < FAST
    return error


def junk_only(folder):
    """The folder's weights replaced by one small tensor that no config size names."""
    save_file({"junk": np.zeros(4, "float32")}, os.path.join(folder, "model.safetensors"))
    return os.path.join(folder, "model.safetensors")


@pytest.mark.parametrize("key, value", [("num_hidden_layers", 100_000), ("max_position_embeddings", 20_000_000),
                                        ("vocab_size", 20_000_000), ("hidden_size", 4096)])
def test_a_claim_beside_a_junk_tensor_is_refused_before_building(bert_folder, key, value):
    config = edit_config(bert_folder, **{key: value})
    weights = junk_only(bert_folder)
    error = refusal(bert_folder)
    assert error.path == config
    assert f"but {weights} holds no embeddings." in str(error)


def test_a_huge_count_or_size_beside_real_tensors_names_the_key(bert_folder):
    config = edit_config(bert_folder, num_hidden_layers=100_000)
    weights = os.path.join(bert_folder, "model.safetensors")
    error = refusal(bert_folder)
    assert (error.path, error.key) == (config, "num_hidden_layers")
    assert str(error) == (f"{config}: num_hidden_layers is 100000, but {weights} holds tensors for 2; the config "
                          "and the weights disagree.")

    edit_config(bert_folder, num_hidden_layers=2, max_position_embeddings=20_000_000)
    error = refusal(bert_folder)
    assert str(error) == (f"{config}: max_position_embeddings is 20000000, but {weights} holds "
                          "embeddings.position_embeddings.weight of shape (32, 16); the config and the weights "
                          "disagree.")


def test_a_size_tensor_that_is_missing_is_refused_naming_the_key(bert_folder):
    edit_config(bert_folder, max_position_embeddings=20_000_000)
    weights = edit_tensors(bert_folder, lambda tensors: tensors.pop("embeddings.position_embeddings.weight"))
    error = refusal(bert_folder)
    assert error.key == "max_position_embeddings"
    assert str(error).endswith(f"max_position_embeddings is 20000000, but {weights} holds no "
                               "embeddings.position_embeddings.weight to hold it; the config and the weights disagree.")


def test_a_layer_without_tensors_is_refused(bert_folder):
    def drop_layer_1(tensors):
        for name in [name for name in tensors if name.startswith("encoder.layer.1.")]:
            del tensors[name]
        tensors["encoder.layer.2.output.dense.bias"] = np.zeros(16, "float32")  # layers 0 and 2: no whole run

    weights = edit_tensors(bert_folder, drop_layer_1)
    error = refusal(bert_folder)
    assert error.key == "num_hidden_layers"
    assert f"num_hidden_layers is 2, but {weights} holds no tensors for number 1" in str(error)


def test_weights_the_config_implies_must_be_in_the_file(bert_folder):
    """Tensors of the right names but tiny shapes: the config's total is more than the file holds."""
    hidden = 4096

    def wide_embeddings(tensors):
        # Every size tensor agrees with the config; the layers' matrices hold almost nothing.
        tensors["embeddings.word_embeddings.weight"] = np.zeros((27, hidden), "float32")
        tensors["embeddings.position_embeddings.weight"] = np.zeros((32, hidden), "float32")
        tensors["embeddings.token_type_embeddings.weight"] = np.zeros((2, hidden), "float32")

    config = edit_config(bert_folder, hidden_size=hidden, num_attention_heads=2)
    weights = edit_tensors(bert_folder, wide_embeddings)
    error = refusal(bert_folder)
    assert (error.path, error.key) == (config, "hidden_size")
    assert str(error).startswith(f"{config}: hidden_size is 4096: the config makes an encoder of at least ")
    assert f"weights, but {weights} holds " in str(error)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_a_config_nested_too_deep_is_refused_before_parsing(bert_folder, name):
    path = os.path.join(bert_folder, name)
    with open(path, "w") as f:
        f.write('{"vocab_size": 27,\n "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    error = refusal(bert_folder)
    assert (error.path, error.line_number) == (path, 2)
    assert str(error) == (f"{path}, line 2: JSON nested deeper than {MAX_JSON_DEPTH} levels; refused before "
                          "parsing it.")


def test_a_google_checkpoint_is_checked_before_its_tensors_are_read(tmp_path, monkeypatch):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, encoder_tensors(encoder), huggingface_config(encoder), TINY_VOCABULARY)
    config = edit_config(folder, "bert_config.json", num_hidden_layers=100_000)
    from kbert.checkpoints import google

    def no_reading(*args):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(google, "check_finite", no_reading)  # what each tensor read goes through
    error = refusal(folder)
    assert (error.path, error.key) == (config, "num_hidden_layers")
    assert "holds tensors for 2" in str(error)


def test_a_google_checkpoint_s_tensors_are_named_as_google_names_them(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, encoder_tensors(encoder), huggingface_config(encoder), TINY_VOCABULARY)
    edit_config(folder, "bert_config.json", intermediate_size=64)
    message = str(refusal(folder))
    # Google's variable, in Google's layout (hidden, intermediate): not Hugging Face's name and shape.
    assert "holds bert/encoder/layer_0/intermediate/dense/kernel of shape (16, 32);" in message, message


def test_an_albert_folder_of_100000_shared_layers_is_refused(tmp_path):
    from tests.albert import albert_sentence_piece_model, random_backbone, write_huggingface_albert

    proto = albert_sentence_piece_model()
    backbone = random_backbone(proto, num_layers=2, num_groups=1, num_inner_repetitions=1)
    folder = write_huggingface_albert(tmp_path / "albert", backbone, proto,
                                      config_changes={"num_hidden_layers": 100_000})
    error = refusal(folder)
    assert error.key == "num_hidden_layers"
    assert str(error) == (f"{os.path.join(folder, 'config.json')}: num_hidden_layers is 100000: 100,000 Transformer "
                          f"layers, over the {MAX_LAYERS:,} kbert builds from a checkpoint.")


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


@pytest.mark.parametrize("changes, key", [({"vocabulary_size": 20_000_000}, "vocabulary_size"),
                                          ({"max_sequence_length": 20_000_000}, "max_sequence_length"),
                                          ({"num_layers": 500}, "num_layers")])
def test_a_keras_hub_preset_claiming_more_than_its_weights_is_refused(preset_folder, changes, key):
    config = edit_serialized(preset_folder, "config.json", **changes)
    error = refusal(preset_folder)
    assert (error.path, error.key) == (config, key)
    weights = os.path.join(preset_folder, "model.weights.h5")
    assert str(error).startswith(f"{config}: {key} is {changes[key]}: the config makes an encoder of at least ")
    assert f"but {weights} holds " in str(error) and "\n" not in str(error)


def test_a_keras_hub_preset_of_too_many_layers_or_a_deep_metadata_file_is_refused(preset_folder):
    config = edit_serialized(preset_folder, "config.json", num_layers=100_000)
    error = refusal(preset_folder)
    assert str(error) == (f"{config}: num_layers is 100000: 100,000 Transformer layers, over the {MAX_LAYERS:,} "
                          "kbert builds from a checkpoint.")
    edit_serialized(preset_folder, "config.json", num_layers=2)
    metadata = os.path.join(preset_folder, "metadata.json")
    with open(metadata, "w") as f:
        f.write("[" * 5000 + "]" * 5000)
    assert load_error(preset_folder).path == metadata


def test_a_sharded_preset_naming_a_file_elsewhere_is_refused(preset_folder, tmp_path):
    os.remove(os.path.join(preset_folder, "model.weights.h5"))
    sharded = os.path.join(preset_folder, "model.weights.json")
    with open(sharded, "w") as f:
        json.dump({"weight_map": {"layers/x": "../elsewhere.weights.h5"}}, f)
    error = load_error(preset_folder)
    assert (error.path, error.key) == (sharded, "weight_map")
    assert "'../elsewhere.weights.h5', which is no file of the preset's folder" in str(error)


def test_real_checkpoints_pass_the_checks(minilm, bert_folder):
    encoder, _ = minilm  # all-MiniLM-L6-v2: its config and tensors agree
    assert encoder.num_layers == 6
    loaded, _ = kbert.load_pretrained(str(bert_folder))
    assert loaded.num_layers == 2


def test_refusals_are_checkpoint_errors():
    assert issubclass(CheckpointError, ValueError)
