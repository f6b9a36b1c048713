import json
import os

import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.checkpoints.loading import checkpoint_format, resolve_checkpoint
from tests.checkpoints.conftest import TEXTS
from tests.test_case import TINY_VOCABULARY, assert_all_close, tiny_encoder_kwargs


def outputs(encoder, tokenizer, texts=TEXTS, sequence_length=16):
    features = kbert.TextPacker(tokenizer, sequence_length=sequence_length)(texts)
    return encoder(features)


# all-MiniLM-L6-v2, against numbers from the reference implementation (float32).
def test_minilm_tokens(minilm):
    _, tokenizer = minilm
    packed = kbert.TextPacker(tokenizer, sequence_length=9)(["the cat sat on the mat."])
    assert packed["token_ids"].numpy().tolist() == [
        [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]
    ]
    assert tokenizer.lowercase


def test_minilm_hidden_states_and_pooler(minilm):
    encoder, tokenizer = minilm
    features = kbert.TextPacker(tokenizer, sequence_length=16)(["the cat sat on the mat."])
    out = encoder(features)
    cls = out["sequence_output"].numpy()[0, 0]
    np.testing.assert_allclose(cls[:5], [0.487211, -0.008805, -0.163671, 0.208769, -0.387027], atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(cls), 7.843063, atol=1e-4)
    mask = features["padding_mask"].numpy()[0].astype(bool)
    mean = out["sequence_output"].numpy()[0][mask].mean(axis=0)
    np.testing.assert_allclose(np.linalg.norm(mean), 6.021478, atol=1e-4)
    np.testing.assert_allclose(
        out["pooled_output"].numpy()[0, :5], [-0.034163, -0.039712, 0.060146, 0.004082, -0.048367],
        atol=1e-4,
    )


def test_minilm_sentence_similarity(minilm):
    encoder, tokenizer = minilm
    texts = ["a man is eating food.", "a man is eating a piece of bread.", "a man is riding a horse."]
    features = kbert.TextPacker(tokenizer, sequence_length=16)(texts)
    tokens = encoder(features)["sequence_output"].numpy()
    mask = features["padding_mask"].numpy()[..., None].astype("float32")
    vectors = (tokens * mask).sum(1) / mask.sum(1)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors[0] @ vectors[1], 0.7553, atol=1e-4)
    np.testing.assert_allclose(vectors[0] @ vectors[2], 0.2474, atol=1e-4)


def test_a_task_takes_a_checkpoint_name_like_a_preset():
    classifier = kbert.classifier("all-minilm-l6-v2", num_classes=3, sequence_length=24, dropout=0.2)
    assert classifier.encoder.hidden_dim == 384 and classifier.encoder.dropout == 0.2
    assert classifier.preprocessor.tokenizer.vocabulary_size() == 30522
    assert classifier.predict(["a fine film"], verbose=0).shape == (1, 3)
    with pytest.raises(ValueError, match="brings its own vocabulary"):
        kbert.classifier("all-minilm-l6-v2", vocabulary=TINY_VOCABULARY)
    with pytest.raises(ValueError, match="num_layers"):
        kbert.classifier("all-minilm-l6-v2", num_layers=2)
    with pytest.raises(ValueError, match="exceeds the checkpoint's 512 positions"):
        kbert.classifier("all-minilm-l6-v2", sequence_length=600)


# The Hugging Face folder format, both ways.
def test_saved_folder_loads_back_identically(tiny_encoder, tmp_path):
    encoder, tokenizer = tiny_encoder
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")
    assert checkpoint_format(folder) == "huggingface"
    assert sorted(os.listdir(folder)) == [
        "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"
    ]
    restored, restored_tokenizer = kbert.load_pretrained(folder)
    assert restored_tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    assert restored.get_config() | {"name": None} == encoder.get_config() | {"name": None}
    assert_all_close(outputs(restored, restored_tokenizer), outputs(encoder, tokenizer), atol=1e-6)
    with pytest.raises(FileExistsError, match="exists already"):
        kbert.save_pretrained(encoder, tokenizer, folder)


def test_both_dropout_rates_travel_through_a_folder_and_loading_overrides_them(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.2, attention_dropout=0.0)
    folder = kbert.save_pretrained(encoder, kbert.Tokenizer(TINY_VOCABULARY), tmp_path / "bert")
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    assert (config["hidden_dropout_prob"], config["attention_probs_dropout_prob"]) == (0.2, 0.0)

    def rates(**overrides):
        restored, _ = kbert.load_pretrained(folder, **overrides)
        return restored.dropout, restored.attention_dropout

    assert rates() == (0.2, 0.0)
    assert rates(attention_dropout=0.1) == (0.2, 0.1)
    # `dropout` alone sets both, as one rate did before there were two.
    assert rates(dropout=0.3) == (0.3, 0.3)
    assert rates(dropout=0.3, attention_dropout=0.0) == (0.3, 0.0)
    classifier = kbert.classifier(folder, sequence_length=16, attention_dropout=0.0)
    assert (classifier.encoder.dropout, classifier.encoder.attention_dropout) == (0.1, 0.0)


def test_minilm_saves_to_the_names_and_values_it_came_with(minilm, tmp_path):
    from safetensors.numpy import load_file

    encoder, tokenizer = minilm
    source = resolve_checkpoint("all-minilm-l6-v2")
    folder = kbert.save_pretrained(encoder, tokenizer, tmp_path / "minilm")
    original = load_file(os.path.join(source, "model.safetensors"))
    saved = load_file(os.path.join(folder, "model.safetensors"))
    assert set(saved) == set(original) - {"embeddings.position_ids"}
    for name, value in saved.items():
        np.testing.assert_array_equal(value, original[name], err_msg=name)
    config = json.load(open(os.path.join(folder, "config.json")))
    reference = json.load(open(os.path.join(source, "config.json")))
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size", "max_position_embeddings", "type_vocab_size", "hidden_act"):
        assert config[key] == reference[key], key


def test_a_failed_save_leaves_no_folder(tiny_encoder, tmp_path, monkeypatch):
    from kbert.checkpoints import huggingface

    encoder, tokenizer = tiny_encoder

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(huggingface, "huggingface_config", broken)
    with pytest.raises(OSError, match="disk full"):
        kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")
    assert os.listdir(tmp_path) == []


def _copy_folder_with(tmp_path, source, tensors=None, config=None, tokenizer_config=None):
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "edited"
    folder.mkdir()
    weights = load_file(os.path.join(source, "model.safetensors"))
    weights = tensors(weights) if tensors else weights
    save_file(weights, str(folder / "model.safetensors"))
    loaded = json.load(open(os.path.join(source, "config.json")))
    (folder / "config.json").write_text(json.dumps(config(loaded) if config else loaded))
    (folder / "vocab.txt").write_text(open(os.path.join(source, "vocab.txt")).read())
    if tokenizer_config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return str(folder)


def test_mismatched_tensors_are_named_with_both_shapes(tiny_encoder, tmp_path):
    encoder, tokenizer = tiny_encoder
    source = kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")

    def edit(weights):
        weights["encoder.layer.1.intermediate.dense.weight"] = np.zeros((31, 16), "float32")
        del weights["pooler.dense.bias"]
        weights["encoder.layer.9.output.dense.weight"] = np.zeros((2, 2), "float32")
        return weights

    with pytest.raises(ValueError) as error:
        kbert.load_pretrained(_copy_folder_with(tmp_path, source, tensors=edit))
    message = str(error.value)
    assert "encoder.layer.1.intermediate.dense.weight has shape (31, 16)" in message
    assert "(16, 32)" in message
    assert "missing tensor pooler.dense.bias" in message
    assert "unknown tensor encoder.layer.9.output.dense.weight of shape (2, 2)" in message


def test_unsupported_configs_and_casing_fail_clearly(tiny_encoder, tmp_path):
    encoder, tokenizer = tiny_encoder
    source = kbert.save_pretrained(encoder, tokenizer, tmp_path / "bert")
    with pytest.raises(ValueError, match="hidden_act 'relu'"):
        kbert.load_pretrained(_copy_folder_with(tmp_path, source, config=lambda c: c | {"hidden_act": "relu"}))
    with pytest.raises(ValueError, match="do_lower_case=False.*uncased"):
        kbert.load_pretrained(
            _copy_folder_with(tmp_path / "..", source, tokenizer_config={"do_lower_case": False})
        )


def test_unknown_names_and_folders_fail_clearly(tmp_path):
    # Offline (tests/conftest.py), a name that is nothing else is looked for in the Hugging Face cache.
    with pytest.raises(FileNotFoundError, match="'bert-huge-unknown' is not a checkpoint folder, a known "
                                                "checkpoint name .*all-minilm-l6-v2"):
        kbert.load_pretrained("bert-huge-unknown")
    with pytest.raises(ValueError, match="not a BERT checkpoint"):
        kbert.load_pretrained(str(tmp_path))


# Google's TF checkpoints, built here from the same weights.
def _google_name(name):
    name = name.replace("cls.predictions.bias", "cls.predictions.output_bias")
    name = name.replace("cls.seq_relationship.weight", "cls.seq_relationship.output_weights")
    name = name.replace("cls.seq_relationship.bias", "cls.seq_relationship.output_bias")
    parts = name.split(".")
    if parts[0] in ("embeddings", "encoder", "pooler"):
        parts = ["bert"] + parts
    if "layer" in parts:
        index = parts.index("layer")
        parts[index : index + 2] = [f"layer_{parts[index + 1]}"]
    is_norm = "LayerNorm" in parts
    renames = {"weight": "gamma" if is_norm else "kernel", "bias": "beta" if is_norm else "bias"}
    if parts[-1] in renames and "embeddings" not in parts[-2] and parts[-1] != "output_weights":
        parts[-1] = renames[parts[-1]]
    elif parts[-1] == "weight":
        parts = parts[:-1]  # embeddings tables have no suffix
    return "/".join(parts)


def write_google_checkpoint(folder, tensors, config, vocabulary):
    os.makedirs(folder)
    graph = tf.Graph()
    with graph.as_default():
        for name, value in tensors.items():
            google = _google_name(name)
            if google.endswith("/kernel"):
                value = value.T
            tf.compat.v1.Variable(value, name=google)
            # Training state that a reader must skip.
            tf.compat.v1.Variable(np.zeros_like(value), name=google + "/adam_m")
        tf.compat.v1.Variable(7, name="global_step", dtype=tf.int64)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(folder, "bert_model.ckpt"), write_meta_graph=False)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(vocabulary) + "\n")


def test_google_checkpoint_gives_identical_outputs(tiny_encoder, tmp_path):
    from kbert.checkpoints.encoder_weights import encoder_tensors
    from kbert.checkpoints.huggingface import huggingface_config

    encoder, tokenizer = tiny_encoder
    tensors = encoder_tensors(encoder)
    hidden = encoder.hidden_dim
    tensors["cls.predictions.transform.dense.weight"] = np.ones((hidden, hidden), "float32")
    tensors["cls.predictions.bias"] = np.ones((encoder.vocabulary_size,), "float32")
    tensors["cls.seq_relationship.weight"] = np.ones((2, hidden), "float32")
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, tensors, huggingface_config(encoder), TINY_VOCABULARY)
    assert checkpoint_format(folder) == "google"
    restored, restored_tokenizer = kbert.load_pretrained(folder)
    assert restored_tokenizer.lowercase  # from the uncased vocabulary
    assert_all_close(outputs(restored, restored_tokenizer), outputs(encoder, tokenizer), atol=1e-6)


@pytest.mark.parametrize("named", ["{outside}/bert_model.ckpt", "../outside/bert_model.ckpt",
                                   "gs://bucket/bert_model.ckpt"])
def test_a_google_folder_reads_only_its_own_checkpoint(tmp_path, named):
    """Its `checkpoint` file cannot make the loader read weights outside the folder."""
    from kbert.checkpoints.google import checkpoint_prefix

    outside, folder = tmp_path / "outside", tmp_path / "google"
    for place in (outside, folder):
        place.mkdir()
        (place / "bert_config.json").write_text("{}")
    (outside / "bert_model.ckpt.index").write_bytes(b"")
    named = named.format(outside=outside)
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
    assert checkpoint_prefix(str(folder)) is None
    (folder / "bert_model.ckpt.index").write_bytes(b"")  # its own weights, under the name given
    assert checkpoint_prefix(str(folder)) == str(folder / "bert_model.ckpt")


# keras-hub presets saved on disk.
def test_keras_hub_preset_matches_keras_hub_and_the_source(tiny_encoder, tmp_path):
    encoder, tokenizer = tiny_encoder
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=encoder.vocabulary_size, num_layers=encoder.num_layers,
        num_heads=encoder.num_heads, hidden_dim=encoder.hidden_dim,
        intermediate_dim=encoder.intermediate_dim, max_sequence_length=encoder.max_sequence_length,
    )
    backbone.set_weights(encoder.get_weights())
    folder = str(tmp_path / "preset")
    backbone.save_to_preset(folder)
    keras_hub.tokenizers.BertTokenizer(vocabulary=TINY_VOCABULARY, lowercase=True).save_to_preset(folder)
    assert checkpoint_format(folder) == "keras_hub"
    restored, restored_tokenizer = kbert.load_pretrained(folder)
    ours = outputs(restored, restored_tokenizer)
    assert_all_close(ours, outputs(encoder, tokenizer), atol=1e-6)
    features = kbert.TextPacker(restored_tokenizer, sequence_length=16)(TEXTS)
    theirs = keras_hub.models.BertBackbone.from_preset(folder)(features)
    # keras-hub's BertBackbone uses GELU's tanh approximation, kbert the exact
    # GELU of BERT's reference code: they differ by about 3e-5 here.
    np.testing.assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=2e-4)
    np.testing.assert_allclose(ours["pooled_output"], theirs["pooled_output"], atol=2e-4)


# The pretraining heads.
def _pretrainer_with_random_heads(encoder):
    pretrainer = kbert.Pretrainer(encoder)
    rng = np.random.default_rng(5)
    for variable in pretrainer.weights:
        if variable.path.startswith(("masked_lm_head", "next_sentence_head")):
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return pretrainer


def _pretrainer_inputs(tokenizer):
    features = kbert.TextPacker(tokenizer, sequence_length=16)(TEXTS)
    features["mask_positions"] = tf.constant([[1, 2], [3, 1]], tf.int32)
    return features


def test_heads_round_trip_through_a_huggingface_folder(tiny_encoder, tmp_path):
    encoder, tokenizer = tiny_encoder
    pretrainer = _pretrainer_with_random_heads(encoder)
    folder = kbert.save_pretrained(pretrainer, tokenizer, tmp_path / "bert")
    restored, restored_tokenizer = kbert.load_pretrained(folder, heads=True)
    assert isinstance(restored, kbert.Pretrainer) and restored.next_sentence_head is not None
    features = _pretrainer_inputs(tokenizer)
    assert_all_close(restored(features), pretrainer(features), atol=1e-5)
    # Without heads=True the same folder gives the bare encoder.
    bare, _ = kbert.load_pretrained(folder)
    assert isinstance(bare, kbert.Encoder)


def test_masked_lm_head_computes_berts_transform(tiny_encoder, tmp_path):
    """Logits = LayerNorm(GELU(h W + b)) E^T + bias, from the checkpoint's tensors by hand."""
    import math

    erf = np.vectorize(math.erf)
    encoder, tokenizer = tiny_encoder
    pretrainer = _pretrainer_with_random_heads(encoder)
    folder = kbert.save_pretrained(pretrainer, tokenizer, tmp_path / "bert")
    from safetensors.numpy import load_file

    t = load_file(os.path.join(folder, "model.safetensors"))
    features = _pretrainer_inputs(tokenizer)
    inputs = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    hidden = encoder(inputs)["sequence_output"].numpy()
    picked = np.take_along_axis(hidden, features["mask_positions"].numpy()[..., None], axis=1)
    h = picked @ t["cls.predictions.transform.dense.weight"].T + t["cls.predictions.transform.dense.bias"]
    h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = (h - mean) / np.sqrt(var + 1e-12) * t["cls.predictions.transform.LayerNorm.weight"] + (
        t["cls.predictions.transform.LayerNorm.bias"]
    )
    logits = h @ t["embeddings.word_embeddings.weight"].T + t["cls.predictions.bias"]
    loaded, _ = kbert.load_pretrained(folder, heads=True)
    np.testing.assert_allclose(loaded(features)["mlm"], logits, atol=1e-4)


def test_heads_from_a_google_checkpoint_and_their_absence(tiny_encoder, tmp_path, minilm):
    from kbert.checkpoints.encoder_weights import encoder_tensors, head_tensors
    from kbert.checkpoints.huggingface import huggingface_config

    encoder, tokenizer = tiny_encoder
    pretrainer = _pretrainer_with_random_heads(encoder)
    tensors = encoder_tensors(encoder) | head_tensors(pretrainer)
    folder = str(tmp_path / "google")
    write_google_checkpoint(folder, tensors, huggingface_config(encoder), TINY_VOCABULARY)
    restored, _ = kbert.load_pretrained(folder, heads=True)
    features = _pretrainer_inputs(tokenizer)
    assert_all_close(restored(features), pretrainer(features), atol=1e-5)
    with pytest.raises(ValueError, match="no masked-LM head"):
        kbert.load_pretrained("all-minilm-l6-v2", heads=True)
