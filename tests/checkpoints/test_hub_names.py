"""Checkpoints by name, offline: Hugging Face Hub ids from a filled cache, keras-hub preset names.

A user online gets the files downloaded; here they are placed where the
downloads would have put them, and `HF_HUB_OFFLINE` keeps every test off the
network.
"""

import os
import shutil

import huggingface_hub
import keras_hub
import numpy as np
import pytest
from huggingface_hub.file_download import repo_folder_name
from keras_hub.src.utils import preset_utils

import kbert
from kbert.checkpoints import UnknownCheckpointError, keras_hub_bert_presets, resolve_checkpoint
from tests.checkpoints.conftest import TEXTS
from tests.test_case import TINY_VOCABULARY, assert_all_close

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def outputs(encoder, tokenizer):
    return encoder(kbert.TextPacker(tokenizer, sequence_length=16)(TEXTS))


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, in offline mode."""
    home = tmp_path / "hf"
    cache = home / "hub"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub read the environment when it was imported: set its constants too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HOME", str(home))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def put_in_cache(cache, repo_id, folder):
    """Lays out `folder`'s files as huggingface_hub caches a download of `repo_id` at its main branch."""
    storage = cache / repo_folder_name(repo_id=repo_id, repo_type="model")
    snapshot = storage / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name in os.listdir(folder):
        shutil.copy(os.path.join(folder, name), snapshot / name)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_a_hugging_face_id_loads_from_the_cache(tiny_encoder, hub_cache, tmp_path):
    encoder, tokenizer = tiny_encoder
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "tiny-bert")
    snapshot = put_in_cache(hub_cache, "some-org/tiny-bert", folder)
    assert resolve_checkpoint("some-org/tiny-bert") == str(snapshot)
    loaded, loaded_tokenizer = kbert.load_pretrained("some-org/tiny-bert")
    assert loaded_tokenizer.get_vocabulary() == tokenizer.get_vocabulary() and loaded_tokenizer.lowercase
    for ours, theirs in zip(loaded.weights, encoder.weights):
        assert ours.path == theirs.path
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
    assert_all_close(outputs(loaded, loaded_tokenizer), outputs(encoder, tokenizer), atol=1e-6)
    # The task builders take the id like a preset, with the checkpoint's own vocabulary.
    classifier = kbert.classifier("some-org/tiny-bert", num_classes=2, sequence_length=16)
    assert classifier.preprocessor.tokenizer.get_vocabulary() == TINY_VOCABULARY


def test_original_bert_uploads_load(tiny_encoder, hub_cache, tmp_path):
    """bert-base-uncased's model.safetensors prefixes names with "bert." and keeps LayerNorm's gamma/beta."""
    from safetensors.numpy import load_file, save_file

    encoder, tokenizer = tiny_encoder
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")
    weights_file = os.path.join(folder, "model.safetensors")
    tensors = load_file(weights_file)
    legacy = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy["bert." + name] = value
    legacy["cls.predictions.bias"] = np.zeros(len(TINY_VOCABULARY), "float32")  # a head, not read
    save_file(legacy, weights_file)
    assert any(name.endswith("LayerNorm.gamma") for name in legacy)
    put_in_cache(hub_cache, "tiny-bert-uncased", folder)  # an id without an organisation
    loaded, loaded_tokenizer = kbert.load_pretrained("tiny-bert-uncased")
    assert_all_close(outputs(loaded, loaded_tokenizer), outputs(encoder, tokenizer), atol=1e-6)


def test_an_id_missing_from_the_cache_fails_clearly(hub_cache):
    with pytest.raises(UnknownCheckpointError) as error:
        kbert.load_pretrained("some-org/not-cached")
    message = str(error.value)
    assert "'some-org/not-cached' is not a checkpoint folder" in message
    assert "HF_HUB_OFFLINE" in message
    assert "all-minilm-l6-v2" in message and "bert_base_en_uncased" in message
    with pytest.raises(ValueError, match="Unknown preset 'some-org/not-cached'.*tiny.*HF_HUB_OFFLINE"):
        kbert.classifier("some-org/not-cached")
    with pytest.raises(UnknownCheckpointError, match="nor a valid Hugging Face model id"):
        kbert.load_pretrained("not a name!")


def test_a_model_without_safetensors_weights_is_explained(tiny_encoder, hub_cache, tmp_path):
    encoder, tokenizer = tiny_encoder
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")
    os.remove(os.path.join(folder, "model.safetensors"))  # as on a repository with PyTorch weights only
    put_in_cache(hub_cache, "some-org/torch-only", folder)
    with pytest.raises(FileNotFoundError, match="'some-org/torch-only' has no model.safetensors"):
        kbert.load_pretrained("some-org/torch-only")


@pytest.fixture
def keras_hub_preset_name(tiny_encoder, tmp_path, monkeypatch):
    """A keras-hub BERT preset saved on disk and registered under a name, as keras-hub's built-in ones are."""
    encoder, _ = tiny_encoder
    folder = str(tmp_path / "preset")
    encoder.to_keras_hub().save_to_preset(folder)
    keras_hub.tokenizers.BertTokenizer(vocabulary=TINY_VOCABULARY, lowercase=True).save_to_preset(folder)
    name = "tiny_bert_test_en_uncased"
    # keras-hub maps a built-in name to its Kaggle handle; a local folder is a valid handle.
    entry = {"metadata": {"description": "a test preset", "params": 0, "path": "bert"},
             "kaggle_handle": folder}
    monkeypatch.setitem(preset_utils.BUILTIN_PRESETS, name, entry)
    monkeypatch.setitem(preset_utils.BUILTIN_PRESETS_FOR_BACKBONE[keras_hub.models.BertBackbone], name, entry)
    return name


def test_a_keras_hub_preset_name_resolves_through_keras_hub(tiny_encoder, keras_hub_preset_name, hub_cache):
    encoder, tokenizer = tiny_encoder
    assert keras_hub_preset_name in keras_hub_bert_presets()
    assert resolve_checkpoint(keras_hub_preset_name) == keras_hub_preset_name
    loaded, loaded_tokenizer = kbert.load_pretrained(keras_hub_preset_name)
    assert loaded_tokenizer.get_vocabulary() == TINY_VOCABULARY and loaded_tokenizer.lowercase
    assert_all_close(outputs(loaded, loaded_tokenizer), outputs(encoder, tokenizer), atol=1e-6)
    with pytest.raises(ValueError, match="no pretraining heads"):
        kbert.load_pretrained(keras_hub_preset_name, heads=True)


def test_the_built_in_keras_hub_names_are_known_and_other_models_are_refused(hub_cache):
    assert {"bert_base_en_uncased", "bert_tiny_en_uncased", "bert_large_en"} <= set(keras_hub_bert_presets())
    # A built-in name is left for keras-hub to fetch (from Kaggle, online); nothing is fetched here.
    assert resolve_checkpoint("bert_base_en_uncased") == "bert_base_en_uncased"
    with pytest.raises(ValueError, match="keras-hub preset of another model, not of BertBackbone"):
        kbert.load_pretrained("gemma_2b_en")
