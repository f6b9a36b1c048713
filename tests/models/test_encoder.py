import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.presets import PRESETS, parameter_count
from tests.test_case import assert_all_close, run_config_round_trip, tiny_encoder_kwargs


def encoder_inputs(batch=2, length=6, vocabulary_size=27, seed=0):
    rng = np.random.default_rng(seed)
    padding_mask = np.ones((batch, length), "int32")
    padding_mask[-1, length - 2 :] = 0
    return {
        "token_ids": rng.integers(5, vocabulary_size, (batch, length)).astype("int32"),
        "segment_ids": np.concatenate(
            [np.zeros((batch, length // 2), "int32"), np.ones((batch, length - length // 2), "int32")], 1
        ),
        "padding_mask": padding_mask,
    }


def test_outputs_are_named_and_shaped():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    outputs = encoder(encoder_inputs())
    assert set(outputs) == {"sequence_output", "pooled_output", "encoder_outputs"}
    assert outputs["sequence_output"].shape == (2, 6, 16)
    assert outputs["pooled_output"].shape == (2, 16)
    assert len(outputs["encoder_outputs"]) == 2
    np.testing.assert_allclose(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    # The pooler is a tanh dense layer on the first token.
    pooled = np.tanh(
        outputs["sequence_output"][:, 0, :].numpy() @ encoder.pooler_dense.kernel.numpy()
        + encoder.pooler_dense.bias.numpy()
    )
    np.testing.assert_allclose(outputs["pooled_output"], pooled, atol=1e-5)


def test_config_round_trip():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    run_config_round_trip(encoder, encoder_inputs())


def test_padding_does_not_change_real_tokens():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0)
    short = encoder_inputs(batch=1, length=5)
    short["padding_mask"][:] = 1
    padded = {name: np.pad(value, [(0, 0), (0, 3)]) for name, value in short.items()}
    a = encoder(short)["sequence_output"].numpy()
    b = encoder(padded)["sequence_output"].numpy()[:, :5]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_equals_keras_hub_bert_backbone_on_same_weights():
    kwargs = tiny_encoder_kwargs()
    encoder = kbert.Encoder(**kwargs, dropout=0.0)
    reference = keras_hub.models.BertBackbone(
        vocabulary_size=kwargs["vocabulary_size"],
        num_layers=kwargs["num_layers"],
        num_heads=2,
        hidden_dim=kwargs["hidden_dim"],
        intermediate_dim=kwargs["intermediate_dim"],
        dropout=0.0,
        max_sequence_length=kwargs["max_sequence_length"],
    )
    pairs = [
        (encoder.token_embedding, reference.get_layer("token_embedding")),
        (encoder.position_embedding, reference.get_layer("position_embedding")),
        (encoder.segment_embedding, reference.get_layer("segment_embedding")),
        (encoder.embeddings_layer_norm, reference.get_layer("embeddings_layer_norm")),
        (encoder.pooler_dense, reference.get_layer("pooled_dense")),
    ] + [
        (layer, reference.get_layer(f"transformer_layer_{i}"))
        for i, layer in enumerate(encoder.transformer_layers)
    ]
    for ours, theirs in pairs:
        ours.set_weights(theirs.get_weights())
    inputs = encoder_inputs()
    ours = encoder(inputs)
    theirs = reference(inputs)
    np.testing.assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=1e-5)
    np.testing.assert_allclose(ours["pooled_output"], theirs["pooled_output"], atol=1e-5)


def test_save_and_load_give_identical_outputs(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    path = str(tmp_path / "encoder.keras")
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert_all_close(encoder(encoder_inputs()), restored(encoder_inputs()))


def test_mixed_precision_policy_threads_through():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dtype="mixed_bfloat16")
    outputs = encoder(encoder_inputs())
    assert outputs["sequence_output"].dtype == tf.bfloat16
    assert encoder.token_embedding.embeddings.dtype == tf.float32
    restored = kbert.Encoder.from_config(encoder.get_config())
    assert restored.token_embedding.dtype_policy.name == "mixed_bfloat16"


def test_builds_under_a_distribution_strategy():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        encoder = kbert.Encoder(**tiny_encoder_kwargs())
    assert isinstance(encoder.token_embedding.embeddings.value, tf.distribute.DistributedValues)
    assert encoder(encoder_inputs())["pooled_output"].shape == (2, 16)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden_dim": 18, "num_heads": 4}, "divisible by `num_heads`"),
        ({"num_layers": 0}, "`num_layers` must be a positive integer"),
        ({"dropout": 1.5}, "`dropout` must be in"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kbert.Encoder(**{**tiny_encoder_kwargs(), **kwargs})


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match="Unknown preset 'huge'.*tiny"):
        kbert.Encoder.from_preset("huge", vocabulary_size=100)


@pytest.mark.parametrize("name", ["tiny", "mini", "small"])
def test_preset_shapes_and_parameter_count(name):
    encoder = kbert.Encoder.from_preset(name, vocabulary_size=1000)
    preset = PRESETS[name]
    assert len(encoder.transformer_layers) == preset["num_layers"]
    assert encoder.hidden_dim == preset["hidden_dim"]
    assert encoder.intermediate_dim == 4 * preset["hidden_dim"]
    assert encoder.count_params() == parameter_count(name, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [("base", 109_482_240), ("large", 335_141_888)])
def test_paper_sizes_have_the_papers_parameter_counts(name, expected):
    # BERT paper: base 110M, large 340M, with the 30,522-token uncased vocabulary.
    encoder = kbert.Encoder.from_preset(name, vocabulary_size=30522)
    assert encoder.count_params() == expected == parameter_count(name, 30522)
    paper = {"base": 110e6, "large": 340e6}[name]
    assert abs(expected - paper) / paper < 0.02
