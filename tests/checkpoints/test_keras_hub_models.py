"""kbert's encoder, tokenizer and task builders with keras-hub's (and keras-nlp's) BERT classes."""

import keras_hub
import numpy as np
import pytest

import kbert
from kbert.checkpoints import tokenizer_from_keras_hub, tokenizer_to_keras_hub
from tests.checkpoints.conftest import TEXTS
from tests.test_case import TINY_VOCABULARY, assert_all_close, tiny_encoder_kwargs


def random_weights(model, seed):
    # Not the initial weights: a weight copied to the wrong place would show.
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.get_weights()])
    return model


@pytest.fixture
def backbone():
    """A tiny keras-hub BertBackbone with random weights."""
    return random_weights(keras_hub.models.BertBackbone(**tiny_encoder_kwargs(), dropout=0.2), seed=7)


@pytest.fixture
def features():
    return kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length=16)(TEXTS)


def weights_by_path(model):
    prefix = model.name + "/"
    return {v.path.removeprefix(prefix).replace("pooled_dense", "pooler_dense"): v.numpy() for v in model.weights}


def with_tanh_gelu(encoder):
    """A copy of the encoder, same weights, with keras-hub's tanh GELU in place of BERT's exact one.

    The one computation in which BertBackbone differs from kbert's encoder;
    with it the same, equal weights must give equal outputs.
    """
    copy = kbert.Encoder.from_config({**encoder.get_config(), "activation": "gelu_approximate"})
    copy.set_weights(encoder.get_weights())
    return copy


def assert_same_outputs(encoder, backbone, features, atol):
    ours, theirs = encoder(features), backbone(features)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(ours[key], theirs[key], atol=atol, err_msg=key)


def test_encoder_from_keras_hub_has_its_weights_and_outputs(backbone, features):
    encoder = kbert.Encoder.from_keras_hub(backbone)
    assert isinstance(encoder, kbert.Encoder) and encoder.dropout == 0.2
    for key in ("vocabulary_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                "max_sequence_length", "num_segments"):
        assert getattr(encoder, key) == getattr(backbone, key), key
    ours, theirs = weights_by_path(encoder), weights_by_path(backbone)
    assert ours.keys() == theirs.keys()
    for path in ours:
        np.testing.assert_array_equal(ours[path], theirs[path], err_msg=path)
    # keras-hub's tanh GELU alone separates the two ...
    assert_same_outputs(encoder, backbone, features, atol=2e-4)
    # ... and with it on both sides, the outputs agree.
    assert_same_outputs(with_tanh_gelu(encoder), backbone, features, atol=1e-6)


def test_encoder_to_keras_hub_and_back(tiny_encoder, features):
    encoder, _ = tiny_encoder
    backbone = encoder.to_keras_hub()
    assert isinstance(backbone, keras_hub.models.BertBackbone)
    assert backbone.dropout == encoder.dropout and backbone.num_layers == encoder.num_layers
    ours, theirs = weights_by_path(encoder), weights_by_path(backbone)
    for path in ours:
        np.testing.assert_array_equal(ours[path], theirs[path], err_msg=path)
    assert_same_outputs(with_tanh_gelu(encoder), backbone, features, atol=1e-6)
    restored = kbert.Encoder.from_keras_hub(backbone)
    assert restored.get_config() | {"name": None} == encoder.get_config() | {"name": None}
    assert_all_close(restored(features), encoder(features), atol=1e-6)


def test_an_encoder_nested_in_a_task_model_converts(tiny_encoder, features):
    encoder, tokenizer = tiny_encoder
    classifier = kbert.classifier(encoder, num_classes=2, vocabulary=tokenizer, sequence_length=16)
    backbone = classifier.encoder.to_keras_hub()
    assert_same_outputs(with_tanh_gelu(classifier.encoder), backbone, features, atol=1e-6)


def test_mixed_precision_is_carried_both_ways():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dtype="mixed_bfloat16")
    backbone = encoder.to_keras_hub()
    assert backbone.token_embedding.dtype_policy.name == "mixed_bfloat16"
    assert kbert.Encoder.from_keras_hub(backbone).layer_dtype_policy.name == "mixed_bfloat16"
    assert kbert.Encoder.from_keras_hub(backbone, dtype="float32").layer_dtype_policy.name == "float32"


def test_task_builders_take_a_keras_hub_backbone(backbone):
    classifier = kbert.classifier(backbone, num_classes=3, vocabulary=TINY_VOCABULARY, sequence_length=16)
    assert isinstance(classifier.encoder, kbert.Encoder)
    ours, theirs = weights_by_path(classifier.encoder), weights_by_path(backbone)
    for path in theirs:
        np.testing.assert_array_equal(ours[path], theirs[path], err_msg=path)
    assert classifier.predict(["the cat sat"], verbose=0).shape == (1, 3)
    with pytest.raises(ValueError, match="built already"):
        kbert.classifier(backbone, vocabulary=TINY_VOCABULARY, num_layers=3)


def token_ids(tokenizer, texts):
    ids = tokenizer(texts)
    return ids if isinstance(ids, list) else ids.to_list()  # keras-hub gives lists for a list


def test_tokenizers_convert_both_ways_and_split_alike():
    texts = ["The cat SAT on the mat!", "see you soon, good dogs ?", "Café films now"]
    ours = kbert.Tokenizer(TINY_VOCABULARY)
    theirs = tokenizer_to_keras_hub(ours)
    assert isinstance(theirs, keras_hub.tokenizers.BertTokenizer)
    assert theirs.get_vocabulary() == TINY_VOCABULARY
    expected = token_ids(ours, texts)
    assert token_ids(theirs, texts) == expected
    assert expected[0][:4] == [5, 7, 9, 10]  # lowercased: "the cat sat on"
    theirs = keras_hub.tokenizers.BertTokenizer(vocabulary=TINY_VOCABULARY, lowercase=True)
    back = tokenizer_from_keras_hub(theirs)
    assert back.lowercase and token_ids(back, texts) == expected


def test_wrong_types_are_named():
    with pytest.raises(TypeError, match="Expected a keras_hub.models.BertBackbone or AlbertBackbone, got Encoder"):
        kbert.Encoder.from_keras_hub(kbert.Encoder(**tiny_encoder_kwargs()))
    with pytest.raises(TypeError, match="kbert.Encoder or a keras-hub BertBackbone or AlbertBackbone, got int"):
        kbert.classifier(3, vocabulary=TINY_VOCABULARY)


def test_keras_nlp_backbones_are_keras_hub_backbones(features):
    """keras-nlp 0.32 (a requirement) is an alias of keras-hub 0.32: its BertBackbone converts too."""
    keras_nlp = pytest.importorskip(
        "keras_nlp", reason="keras-nlp is not installed (pip install -r requirements.txt)"
    )
    assert keras_nlp.models.BertBackbone is keras_hub.models.BertBackbone
    backbone = random_weights(keras_nlp.models.BertBackbone(**tiny_encoder_kwargs()), seed=9)
    assert_same_outputs(with_tanh_gelu(kbert.Encoder.from_keras_hub(backbone)), backbone, features, atol=1e-6)
