"""ALBERT checkpoints: Hugging Face folders and keras-hub presets made offline, loaded and compared with keras-hub."""

import json
import os

import keras_hub
import numpy as np
import pytest
from safetensors.numpy import load_file

import kbert
from kbert.checkpoints import albert
from tests.albert import albert_sentence_piece_model, random_backbone, write_huggingface_albert
from tests.test_case import assert_all_close

TEXTS = (["the film sat on the mat.", "in 1999, a good cat!"], ["see you soon", "a prize"])
SHAPES = {
    "one group": dict(num_layers=2, num_groups=1, num_inner_repetitions=1),
    "2 groups x 2 inner": dict(num_layers=4, num_groups=2, num_inner_repetitions=2),
    "no sharing": dict(num_layers=2, num_groups=2, num_inner_repetitions=1),
}


@pytest.fixture(scope="module")
def proto():
    return albert_sentence_piece_model()


def encoder_inputs(tokenizer, texts=TEXTS, sequence_length=16):
    return kbert.TextPacker(tokenizer, sequence_length=sequence_length)(texts)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_huggingface_folder_matches_keras_hub_albert_backbone(proto, tmp_path, shape):
    backbone = random_backbone(proto, **SHAPES[shape])
    folder = write_huggingface_albert(tmp_path / "albert", backbone, proto)
    encoder, tokenizer = kbert.load_pretrained(str(folder))
    assert isinstance(tokenizer, kbert.SentencePieceTokenizer) and tokenizer.proto == proto
    assert (encoder.embedding_size, encoder.num_groups, encoder.num_inner_repetitions) == (
        8, backbone.num_groups, backbone.num_inner_repetitions
    )
    assert encoder.activation == "gelu_approximate" and encoder.dropout == 0.0
    inputs = encoder_inputs(tokenizer)
    ours, theirs = encoder(inputs), backbone(inputs)
    np.testing.assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=1e-5)
    np.testing.assert_allclose(ours["pooled_output"], theirs["pooled_output"], atol=1e-5)
    assert len(ours["encoder_outputs"]) == backbone.num_layers


def test_names_without_the_albert_prefix_load_too(proto, tmp_path):
    backbone = random_backbone(proto, **SHAPES["one group"])
    folder = write_huggingface_albert(tmp_path / "albert", backbone, proto, prefix="")
    encoder, tokenizer = kbert.load_pretrained(str(folder))
    inputs = encoder_inputs(tokenizer)
    np.testing.assert_allclose(encoder(inputs)["sequence_output"], backbone(inputs)["sequence_output"], atol=1e-5)


@pytest.mark.parametrize("shape", ["one group", "2 groups x 2 inner"])
def test_keras_hub_preset_on_disk_and_from_keras_hub(proto, tmp_path, shape):
    backbone = random_backbone(proto, **SHAPES[shape])
    tokenizer = keras_hub.tokenizers.AlbertTokenizer(proto=proto)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    tokenizer.save_to_preset(preset)
    encoder, kbert_tokenizer = kbert.load_pretrained(preset)
    assert isinstance(kbert_tokenizer, kbert.SentencePieceTokenizer) and kbert_tokenizer.proto == proto
    inputs = encoder_inputs(kbert_tokenizer)
    expected = backbone(inputs)
    for loaded in (encoder, kbert.Encoder.from_keras_hub(backbone)):
        outputs = loaded(inputs)
        np.testing.assert_allclose(outputs["sequence_output"], expected["sequence_output"], atol=1e-5)
        np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-5)
    # And back: an AlbertBackbone with the same weights.
    again = encoder.to_keras_hub()
    assert isinstance(again, keras_hub.models.AlbertBackbone)
    assert (again.num_groups, again.num_inner_repetitions) == (backbone.num_groups, backbone.num_inner_repetitions)
    np.testing.assert_allclose(again(inputs)["sequence_output"], expected["sequence_output"], atol=1e-5)


def test_shared_encoder_with_equal_sizes_goes_through_an_identity_projection(proto):
    encoder = kbert.Encoder(vocabulary_size=800, num_layers=2, hidden_dim=16, num_heads=2,
                            intermediate_dim=32, num_groups=1, activation="gelu_approximate",
                            max_sequence_length=32, dropout=0.0)
    backbone = encoder.to_keras_hub()
    assert backbone.embedding_dim == 16
    inputs = encoder_inputs(kbert.SentencePieceTokenizer(proto))
    np.testing.assert_allclose(backbone(inputs)["sequence_output"], encoder(inputs)["sequence_output"], atol=1e-5)
    restored = kbert.Encoder.from_keras_hub(backbone)
    assert restored.embedding_projection is None
    np.testing.assert_allclose(restored(inputs)["sequence_output"], encoder(inputs)["sequence_output"], atol=1e-5)


def test_save_pretrained_round_trips_an_albert_folder(proto, tmp_path):
    backbone = random_backbone(proto, **SHAPES["2 groups x 2 inner"])
    encoder, tokenizer = kbert.load_pretrained(
        write_huggingface_albert(tmp_path / "source", backbone, proto)
    )
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["model_type"] == "albert" and config["hidden_act"] == "gelu_new"
    assert (config["num_hidden_groups"], config["inner_group_num"], config["embedding_size"]) == (2, 2, 8)
    saved = load_file(os.path.join(folder, "model.safetensors"))
    source = load_file(tmp_path / "source" / "model.safetensors")
    assert sorted(saved) == sorted(name.removeprefix("albert.") for name in source)
    for name, value in saved.items():
        np.testing.assert_array_equal(value, source["albert." + name])
    reloaded, reloaded_tokenizer = kbert.load_pretrained(folder)
    assert reloaded_tokenizer.proto == proto
    inputs = encoder_inputs(tokenizer)
    assert_all_close(reloaded(inputs), encoder(inputs), atol=0)


def test_pretraining_heads_load_and_save(proto, tmp_path):
    backbone = random_backbone(proto, **SHAPES["one group"])
    rng = np.random.default_rng(0)
    heads = {
        "predictions.dense.weight": rng.normal(0, 0.2, (8, 16)).astype("float32"),
        "predictions.dense.bias": rng.normal(0, 0.2, 8).astype("float32"),
        "predictions.LayerNorm.weight": rng.normal(1, 0.2, 8).astype("float32"),
        "predictions.LayerNorm.bias": rng.normal(0, 0.2, 8).astype("float32"),
        "predictions.bias": rng.normal(0, 0.2, backbone.vocabulary_size).astype("float32"),
        "predictions.decoder.bias": np.zeros(backbone.vocabulary_size, "float32"),
        "sop_classifier.classifier.weight": rng.normal(0, 0.2, (2, 16)).astype("float32"),
        "sop_classifier.classifier.bias": np.zeros(2, "float32"),
    }
    folder = write_huggingface_albert(tmp_path / "albert", backbone, proto, heads=heads)
    pretrainer, tokenizer = kbert.load_pretrained(str(folder), heads=True)
    assert isinstance(pretrainer, kbert.Pretrainer)
    head = pretrainer.masked_lm_head
    np.testing.assert_array_equal(head._intermediate_dense.kernel.numpy(), heads["predictions.dense.weight"].T)
    assert pretrainer.objective == "sop"
    np.testing.assert_array_equal(pretrainer.sentence_order_head.kernel.numpy(),
                                  heads["sop_classifier.classifier.weight"].T)
    saved = kbert.save_pretrained(pretrainer, tokenizer, tmp_path / "saved")
    tensors = load_file(os.path.join(saved, "model.safetensors"))
    for name in ("predictions.dense.weight", "predictions.LayerNorm.weight", "predictions.bias",
                 "sop_classifier.classifier.weight", "sop_classifier.classifier.bias"):
        np.testing.assert_array_equal(tensors[name], heads[name])
    assert "albert.encoder.embedding_hidden_mapping_in.weight" in tensors
    fill = kbert.fill_mask(pretrainer, tokenizer=tokenizer, top_k=2)
    assert len(fill("the [MASK] sat.")) == 1


def test_mismatched_config_fails_with_the_tensors_named(proto, tmp_path):
    backbone = random_backbone(proto, **SHAPES["2 groups x 2 inner"])
    folder = write_huggingface_albert(tmp_path / "groups", backbone, proto, config_changes={"num_hidden_groups": 1})
    # The config is checked against the tensors before an encoder of its size is built.
    with pytest.raises(ValueError, match=r"groups/config\.json: num_hidden_groups is 1, but \S*groups/"
                       r"model\.safetensors holds tensors for 2"):
        kbert.load_pretrained(str(folder))
    folder = write_huggingface_albert(tmp_path / "size", backbone, proto, config_changes={"embedding_size": 12})
    with pytest.raises(ValueError, match=r"embedding_size is 12, but \S*model\.safetensors holds "
                       r"embeddings\.word_embeddings\.weight of shape \(800, 8\)"):
        kbert.load_pretrained(str(folder))
    folder = write_huggingface_albert(tmp_path / "vocab", backbone, proto, config_changes={"vocab_size": 900})
    with pytest.raises(ValueError, match=r"vocab_size is 900, but \S*model\.safetensors holds "
                       r"embeddings\.word_embeddings\.weight of shape \(800, 8\)"):
        kbert.load_pretrained(str(folder))
    folder = write_huggingface_albert(tmp_path / "act", backbone, proto, config_changes={"hidden_act": "relu"})
    with pytest.raises(ValueError, match="hidden_act 'relu' is not supported"):
        kbert.load_pretrained(str(folder))
    folder = write_huggingface_albert(tmp_path / "divide", backbone, proto, config_changes={"num_hidden_groups": 3})
    with pytest.raises(ValueError, match="num_hidden_groups 3 does not divide num_hidden_layers 4"):
        kbert.load_pretrained(str(folder))
    folder = write_huggingface_albert(tmp_path / "no-model", backbone, proto)
    os.remove(tmp_path / "no-model" / "spiece.model")
    with pytest.raises(FileNotFoundError, match="has no spiece.model"):
        kbert.load_pretrained(str(folder))


def test_malformed_albert_folders_name_the_file_and_key(proto, tmp_path):
    from safetensors.numpy import load_file, save_file

    from kbert.checkpoints.checkpoint_files import CheckpointError

    backbone = random_backbone(proto, **SHAPES["one group"])

    def error_of(folder):
        with pytest.raises(CheckpointError) as error:
            kbert.load_pretrained(str(folder))
        assert "\n" not in str(error.value)
        return error.value

    for key, value in [("num_hidden_groups", "one"), ("embedding_size", 0), ("inner_group_num", 1.5),
                       ("hidden_act", "swish"), ("hidden_dropout_prob", -0.1)]:
        folder = write_huggingface_albert(tmp_path / key, backbone, proto, config_changes={key: value})
        error = error_of(folder)
        assert (error.path, error.key) == (str(folder / "config.json"), key)

    folder = write_huggingface_albert(tmp_path / "albert", backbone, proto)
    (folder / "tokenizer_config.json").write_text('{"keep_accents": "no"}')
    error = error_of(folder)
    assert (error.path, error.key) == (str(folder / "tokenizer_config.json"), "keep_accents")
    (folder / "tokenizer_config.json").unlink()

    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    tensors["albert.pooler.bias"][0] = np.inf
    save_file(tensors, weights)
    error = error_of(folder)
    assert (error.path, error.key) == (str(weights), "albert.pooler.bias")
    weights.write_bytes(weights.read_bytes()[:-10])
    assert str(error_of(folder)).startswith(f"{weights}: not a readable safetensors file")


def test_save_pretrained_refuses_mixed_formats(proto, tmp_path):
    albert_encoder = kbert.Encoder(vocabulary_size=800, num_layers=2, hidden_dim=16, num_heads=2,
                                   intermediate_dim=32, embedding_size=8, max_sequence_length=32)
    with pytest.raises(ValueError, match="ALBERT-shaped encoder and a Tokenizer"):
        kbert.save_pretrained(albert_encoder, kbert.Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
                              tmp_path / "x")


def test_albert_hub_names_resolve_like_bert_ones(monkeypatch, tmp_path):
    from kbert.checkpoints import loading

    assert "albert_base_en_uncased" in loading.keras_hub_albert_presets()
    assert loading.resolve_checkpoint("albert_base_en_uncased") == "albert_base_en_uncased"
    assert albert.SENTENCE_PIECE_FILE in loading.HUB_FILES
    asked = {}

    def snapshot_download(repo_id, allow_patterns):
        asked["repo_id"], asked["patterns"] = repo_id, allow_patterns
        (tmp_path / "model.safetensors").write_bytes(b"")
        return str(tmp_path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert loading.resolve_checkpoint("albert-base-v2") == str(tmp_path)
    assert asked["repo_id"] == "albert-base-v2" and "spiece.model" in asked["patterns"]
