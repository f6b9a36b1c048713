import os

import keras
import numpy as np
import pytest

import kbert
from tests.test_case import (
    ARCHITECTURES,
    assert_all_close,
    numpy,
    run_config_round_trip,
    run_task_test,
    tiny_encoder_kwargs,
    TINY_VOCABULARY,
)

TEXTS = ["the cat sat on the mat", "a good film", "free prize now!", "see"]


def tiny_parts(sequence_length=12, num_layers=3, architecture="bert"):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)
    encoder = kbert.Encoder(**{**tiny_encoder_kwargs(architecture=architecture), "num_layers": num_layers})
    return encoder, preprocessor


def embed(embedder, texts, output="sentence_embedding"):
    """The model called eagerly on packed texts: quicker than `predict`, which compiles."""
    return np.asarray(embedder(embedder.preprocessor(texts))[output])


def encoder_outputs(encoder, preprocessor, texts):
    inputs = preprocessor(texts)
    outputs = encoder(inputs, training=False)
    return numpy(inputs["padding_mask"]), keras.tree.map_structure(np.asarray, outputs)


@pytest.mark.all_backends
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_task_harness(tmp_path, architecture):
    encoder, preprocessor = tiny_parts(architecture=architecture)
    embedder = kbert.Embedder(encoder, preprocessor, normalize=True)
    restored, outputs = run_task_test(embedder, TEXTS, None, tmp_path, trains=False,
                                      request={"text": TEXTS})
    assert outputs["sentence_embedding"].shape == (4, 16)
    assert restored.normalize


def test_mean_pooling_is_the_masked_mean_of_the_last_layer():
    encoder, preprocessor = tiny_parts()
    embedder = kbert.Embedder(encoder, preprocessor)  # mean pooling by default
    mask, outputs = encoder_outputs(encoder, preprocessor, TEXTS)
    sequence = outputs["sequence_output"]
    expected = (sequence * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    result = embedder.predict(TEXTS, verbose=0)
    np.testing.assert_allclose(result["sentence_embedding"], expected, atol=1e-5)
    np.testing.assert_array_equal(result["padding_mask"], mask)
    # The mean is not the average over all positions: padding is left out.
    assert not np.allclose(result["sentence_embedding"], sequence.mean(axis=1), atol=1e-3)
    np.testing.assert_allclose(embedder.embed(TEXTS), expected, atol=1e-5)


def test_padding_does_not_change_the_embedding():
    encoder, short = tiny_parts(sequence_length=10)
    long = kbert.TextPacker(short.tokenizer, 30)
    alone = embed(kbert.Embedder(encoder, short), ["a good film"])
    padded = embed(kbert.Embedder(encoder, long), ["a good film"])
    np.testing.assert_allclose(alone, padded, atol=1e-5)
    # Nor does the batch it is in.
    in_batch = embed(kbert.Embedder(encoder, short), ["the cat sat on the mat , the dog sat", "a good film"])
    np.testing.assert_allclose(in_batch[1:], alone, atol=1e-5)


def test_cls_and_pooled_variants():
    encoder, preprocessor = tiny_parts()
    _, outputs = encoder_outputs(encoder, preprocessor, TEXTS)
    cls = embed(kbert.Embedder(encoder, preprocessor, pooling="cls"), TEXTS)
    np.testing.assert_allclose(cls, outputs["sequence_output"][:, 0], atol=1e-5)
    pooled = embed(kbert.Embedder(encoder, preprocessor, pooling="pooled"), TEXTS)
    np.testing.assert_allclose(pooled, outputs["pooled_output"], atol=1e-5)
    assert not np.allclose(cls, pooled, atol=1e-3)


def test_token_features_concatenate_the_chosen_layers():
    encoder, preprocessor = tiny_parts(num_layers=3)
    _, outputs = encoder_outputs(encoder, preprocessor, TEXTS)
    blocks = outputs["encoder_outputs"]
    features = kbert.Embedder(encoder, preprocessor, feature_layers=(-3, -1))(preprocessor(TEXTS))
    features = keras.tree.map_structure(np.asarray, features)
    assert features["token_features"].shape == (4, 12, 2 * 16)
    np.testing.assert_allclose(features["token_features"], np.concatenate([blocks[0], blocks[2]], -1), atol=1e-5)
    last = embed(kbert.Embedder(encoder, preprocessor), TEXTS, "token_features")
    np.testing.assert_allclose(last, outputs["sequence_output"], atol=1e-5)
    # The sentence embedding still pools the last layer.
    np.testing.assert_allclose(
        features["sentence_embedding"], embed(kbert.Embedder(encoder, preprocessor), TEXTS), atol=1e-6
    )


def test_normalize_gives_unit_vectors_in_the_same_direction():
    encoder, preprocessor = tiny_parts()
    raw = embed(kbert.Embedder(encoder, preprocessor, pooling="mean"), TEXTS)
    unit = embed(kbert.Embedder(encoder, preprocessor, pooling="mean", normalize=True), TEXTS)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=-1, keepdims=True), atol=1e-5)


def test_config_round_trip_and_save_load(tmp_path):
    encoder, preprocessor = tiny_parts()
    embedder = kbert.Embedder(encoder, preprocessor, pooling="cls", normalize=True, feature_layers=(0, -1))
    restored = run_config_round_trip(embedder, preprocessor(TEXTS))
    assert (restored.pooling, restored.normalize, restored.feature_layers) == ("cls", True, (0, -1))
    path = os.path.join(tmp_path, "embedder.keras")
    embedder.save(path)
    loaded = kbert.load_model(path)
    assert type(loaded) is kbert.Embedder and loaded.get_config() == embedder.get_config()
    assert_all_close(loaded.predict(TEXTS, verbose=0), embedder.predict(TEXTS, verbose=0), atol=1e-6)


def test_entry_point_and_text_pairs():
    embedder = kbert.embedder("tiny", vocabulary=TINY_VOCABULARY, sequence_length=16, feature_layers=(-2, -1))
    result = embedder.predict((["the cat"], ["sat on the mat"]), verbose=0)
    assert sorted(result) == ["padding_mask", "sentence_embedding", "token_features"]
    assert result["sentence_embedding"].shape == (1, 128)
    assert result["token_features"].shape == (1, 16, 256)
    assert result["padding_mask"][0].tolist() == [1] * 9 + [0] * 7  # [CLS] the cat [SEP] sat on the mat [SEP]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pooling": "max"}, r"`pooling` must be one of \('mean', 'cls', 'pooled'\), got 'max'"),
        ({"feature_layers": (3,)}, "entry 3 is not a layer of this 3-layer encoder"),
        ({"feature_layers": (-4,)}, "entry -4 is not a layer"),
        ({"feature_layers": (2, -1)}, "names a layer twice"),
        ({"feature_layers": ()}, "at least one layer"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    encoder, preprocessor = tiny_parts()
    with pytest.raises(ValueError, match=message):
        kbert.Embedder(encoder, preprocessor, **kwargs)
