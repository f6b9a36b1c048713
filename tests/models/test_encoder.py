import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.models.transformer_block import TransformerBlock
from kbert.models.presets import PRESETS, encoder_parameter_count, parameter_count
from tests.test_case import (
    ARCHITECTURES,
    assert_all_close,
    assert_allclose,
    numpy,
    run_config_round_trip,
    run_layer_test,
    run_precision_test,
    tiny_encoder_kwargs,
    TINY_VOCABULARY,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


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
    assert_allclose(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    # The pooler is a tanh dense layer on the first token.
    pooled = np.tanh(
        numpy(outputs["sequence_output"][:, 0, :]) @ numpy(encoder.pooler_dense.kernel)
        + numpy(encoder.pooler_dense.bias)
    )
    assert_allclose(outputs["pooled_output"], pooled, atol=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_layer_harness(architecture):
    encoder = kbert.Encoder(**tiny_encoder_kwargs(architecture=architecture))
    run_layer_test(encoder, encoder_inputs())
    run_config_round_trip(encoder, encoder_inputs())


def test_attention_dropout_is_a_rate_of_its_own_that_follows_dropout_unless_given():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.2, attention_dropout=0.0)
    assert encoder.dropout == 0.2 and encoder.attention_dropout == 0.0
    assert [block.attention_dropout for block in encoder.transformer_layers] == [0.0, 0.0]
    assert [block.dropout for block in encoder.transformer_layers] == [0.2, 0.2]
    run_config_round_trip(encoder, encoder_inputs())
    assert kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.2).get_config()["attention_dropout"] == 0.2
    # A config saved before the rate existed keeps one rate for both.
    config = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.3).get_config()
    del config["attention_dropout"]
    assert kbert.Encoder.from_config(config).attention_dropout == 0.3
    assert kbert.Encoder.from_preset("tiny", vocabulary_size=30, attention_dropout=0.0).attention_dropout == 0.0


def test_padding_does_not_change_real_tokens():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0)
    short = encoder_inputs(batch=1, length=5)
    short["padding_mask"][:] = 1
    padded = {name: np.pad(value, [(0, 0), (0, 3)]) for name, value in short.items()}
    a = numpy(encoder(short)["sequence_output"])
    b = numpy(encoder(padded)["sequence_output"])[:, :5]
    assert_allclose(a, b, atol=1e-5)


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
    assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=1e-5)
    assert_allclose(ours["pooled_output"], theirs["pooled_output"], atol=1e-5)


def test_save_and_load_give_identical_outputs(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    path = str(tmp_path / "encoder.keras")
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert_all_close(encoder(encoder_inputs()), restored(encoder_inputs()))


def test_precision_harness():
    run_precision_test(lambda policy: kbert.Encoder(**tiny_encoder_kwargs(), dtype=policy), encoder_inputs())


@pytest.mark.tensorflow_backend
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
        ({"attention_dropout": -0.1}, "`attention_dropout` must be in"),
        ({"attention_dropout": "0"}, "`attention_dropout` must be in"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kbert.Encoder(**{**tiny_encoder_kwargs(), **kwargs})


def test_from_preset_builds_a_fresh_size_and_sends_weights_to_load_pretrained():
    with pytest.raises(ValueError, match=r"'huge' is not a kbert preset \(a size: \['tiny'.*load_pretrained\('huge'\)"):
        kbert.Encoder.from_preset("huge", vocabulary_size=100)
    # A keras-hub user's spellings: weights are load_pretrained's; load_weights=False is what this does.
    with pytest.raises(ValueError, match=r"presets are sizes, without weights.*load_pretrained\('tiny'\)"):
        kbert.Encoder.from_preset("tiny", vocabulary_size=100, load_weights=True)
    with pytest.raises(ValueError, match="give `vocabulary_size`"):
        kbert.Encoder.from_preset("tiny")
    assert kbert.Encoder.from_preset("tiny", vocabulary_size=100, load_weights=False).vocabulary_size == 100


@pytest.mark.tensorflow_backend  # shapes and counts: the same on every backend
@pytest.mark.parametrize("name", ["tiny", "mini", "small"])
def test_preset_shapes_and_parameter_count(name):
    encoder = kbert.Encoder.from_preset(name, vocabulary_size=1000)
    preset = PRESETS[name]
    assert len(encoder.transformer_layers) == preset["num_layers"]
    assert encoder.hidden_dim == preset["hidden_dim"]
    assert encoder.intermediate_dim == 4 * preset["hidden_dim"]
    assert encoder.count_params() == parameter_count(name, 1000)


@pytest.mark.tensorflow_backend  # parameter counts: the same on every backend
@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [("base", 109_482_240), ("large", 335_141_888)])
def test_paper_sizes_have_the_papers_parameter_counts(name, expected):
    # BERT paper: base 110M, large 340M, with the 30,522-token uncased vocabulary.
    # Counted on bfloat16 weights: the same count in half the memory.
    encoder = kbert.Encoder.from_preset(name, vocabulary_size=30522, dtype="bfloat16")
    assert encoder.count_params() == expected == parameter_count(name, 30522)
    paper = {"base": 110e6, "large": 340e6}[name]
    assert abs(expected - paper) / paper < 0.02


def albert_kwargs(**overrides):
    """A tiny ALBERT: E < H, 4 layers in 2 groups of 2 distinct blocks."""
    kwargs = {**tiny_encoder_kwargs(), "num_layers": 4, "embedding_size": 8, "num_groups": 2,
              "num_inner_repetitions": 2, "activation": "gelu_approximate"}
    kwargs.update(overrides)
    return kwargs


def test_factorized_embeddings_and_sharing_have_the_hand_counted_parameters():
    v, e, h, i, positions = len(TINY_VOCABULARY), 8, 16, 32, 32
    embeddings = (v + positions + 2) * e + 2 * e
    projection = e * h + h
    block = 4 * (h * h + h) + (h * i + i + i * h + h) + 4 * h
    pooler = h * h + h
    for groups, inner in [(1, 1), (2, 2), (4, 1)]:
        encoder = kbert.Encoder(**albert_kwargs(num_groups=groups, num_inner_repetitions=inner))
        assert len(encoder.transformer_layers) == groups * inner
        assert encoder.count_params() == embeddings + projection + groups * inner * block + pooler
        assert encoder.count_params() == encoder_parameter_count(**encoder.get_config())


def test_shared_layers_are_one_set_of_variables():
    encoder = kbert.Encoder(**albert_kwargs(num_groups=1, num_inner_repetitions=1, dropout=0.0))
    assert len(encoder.transformer_layers) == 1
    assert all(blocks == encoder.transformer_layers for blocks in encoder.layer_blocks)
    inputs = encoder_inputs()
    before = [numpy(x) for x in encoder(inputs)["encoder_outputs"]]
    assert len(before) == 4
    # One change to the shared weights changes every layer's output.
    kernel = encoder.transformer_layers[0].feedforward_output_dense.kernel
    kernel.assign(numpy(kernel) * 1.5)
    after = [numpy(x) for x in encoder(inputs)["encoder_outputs"]]
    for old, new in zip(before, after):
        assert np.abs(old - new).max() > 1e-3


def test_groups_apply_their_blocks_in_order():
    # Layer i uses group i // (layers per group); each group's inner blocks run in turn.
    encoder = kbert.Encoder(**albert_kwargs(num_layers=6, num_groups=3, num_inner_repetitions=2))
    names = [[block.name for block in blocks] for blocks in encoder.layer_blocks]
    assert names == [[f"transformer_group_{g}_layer_0", f"transformer_group_{g}_layer_1"]
                     for g in (0, 0, 1, 1, 2, 2)]


def test_embedding_size_equal_to_hidden_without_sharing_is_exactly_bert():
    bert = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0)
    same = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0, embedding_size=16, num_groups=2)
    assert same.embedding_projection is None
    assert [w.path for w in same.weights] == [w.path for w in bert.weights]
    same.set_weights(bert.get_weights())
    assert_all_close(bert(encoder_inputs()), same(encoder_inputs()), atol=0)


def test_albert_config_round_trip_and_save(tmp_path):
    encoder = kbert.Encoder(**albert_kwargs())
    run_config_round_trip(encoder, encoder_inputs())
    path = str(tmp_path / "albert.keras")
    encoder.save(path)
    assert_all_close(encoder(encoder_inputs()), keras.saving.load_model(path)(encoder_inputs()))


@pytest.mark.parametrize("groups, inner", [(1, 1), (2, 2)])
def test_albert_equals_keras_hub_albert_backbone_on_same_weights(groups, inner):
    kwargs = albert_kwargs(num_groups=groups, num_inner_repetitions=inner, dropout=0.0)
    encoder = kbert.Encoder(**kwargs)
    reference = keras_hub.models.AlbertBackbone(
        vocabulary_size=kwargs["vocabulary_size"], num_layers=4, num_heads=2, embedding_dim=8,
        hidden_dim=16, intermediate_dim=32, num_groups=groups, num_inner_repetitions=inner,
        dropout=0.0, max_sequence_length=kwargs["max_sequence_length"],
    )
    names = ["token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm",
             "embedding_projection"]
    pairs = [(encoder.get_layer(name), reference.get_layer(name)) for name in names]
    pairs.append((encoder.pooler_dense, reference.get_layer("pooled_dense")))
    pairs += [
        (encoder.get_layer(f"transformer_group_{g}_layer_{k}"), reference.get_layer(f"group_{g}_inner_layer_{k}"))
        for g in range(groups) for k in range(inner)
    ]
    for ours, theirs in pairs:
        ours.set_weights(theirs.get_weights())
    inputs = encoder_inputs()
    ours, theirs = encoder(inputs), reference(inputs)
    assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=1e-5)
    assert_allclose(ours["pooled_output"], theirs["pooled_output"], atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"embedding_size": 0}, "`embedding_size` must be a positive integer"),
        ({"embedding_size": -8}, "`embedding_size` must be a positive integer"),
        ({"num_groups": 3}, r"`num_groups` \(3\) must divide `num_layers` \(4\)"),
        ({"num_inner_repetitions": 0}, "`num_inner_repetitions` must be a positive integer"),
        ({"activation": "relu"}, "`activation` must be one of"),
    ],
)
def test_bad_albert_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kbert.Encoder(**albert_kwargs(**kwargs))


@pytest.mark.tensorflow_backend  # parameter counts: the same on every backend
@pytest.mark.parametrize("name", ["albert-base", "albert-large", "albert-xlarge", "albert-xxlarge"])
def test_albert_presets_count_the_parameters_of_the_published_models(name):
    # keras-hub's AlbertBackbone presets (the published ALBERT v2 weights, 30,000 tokens)
    # record their parameter counts: the presets' shapes give exactly those.
    published = {"albert-base": "albert_base_en_uncased", "albert-large": "albert_large_en_uncased",
                 "albert-xlarge": "albert_extra_large_en_uncased",
                 "albert-xxlarge": "albert_extra_extra_large_en_uncased"}[name]
    expected = keras_hub.models.AlbertBackbone.presets[published]["metadata"]["params"]
    assert parameter_count(name, 30000) == expected
    # The ALBERT paper's Table 1, to its rounding (12M, 18M; 59M and 223M where it prints
    # 60M and 235M: the published checkpoints have these shapes and counts too).
    paper = {"albert-base": 12, "albert-large": 18, "albert-xlarge": 59, "albert-xxlarge": 223}[name]
    assert round(expected / 1e6) == paper
    if name in ("albert-base", "albert-large"):
        encoder = kbert.Encoder.from_preset(name, vocabulary_size=30000)
        assert encoder.count_params() == expected
        assert len(encoder.transformer_layers) == 1 and len(encoder.layer_blocks) == PRESETS[name]["num_layers"]


def pruned_kwargs(**overrides):
    """A tiny encoder of 3 layers with 4 heads of size 4, which keep 4, 1 and 3 heads."""
    return {**tiny_encoder_kwargs(), "num_layers": 3, "num_heads": 4, "heads_per_layer": [4, 1, 3], **overrides}


@pytest.mark.tensorflow_backend  # shapes and counts (test_across_backends compares a pruned encoder's outputs)
def test_heads_per_layer_shapes_and_parameter_count():
    encoder = kbert.Encoder(**pruned_kwargs())
    for block, heads in zip(encoder.transformer_layers, [4, 1, 3]):
        attention = block.self_attention_layer
        assert tuple(attention.query_dense.kernel.shape) == (16, heads, 4)
        assert tuple(attention.value_dense.bias.shape) == (heads, 4)
        assert tuple(attention.output_dense.kernel.shape) == (heads, 4, 16)
    # Every block, pruned or not, is kbert's lean block.
    assert all(isinstance(block, TransformerBlock) for block in encoder.transformer_layers)
    outputs = encoder(encoder_inputs())
    assert outputs["sequence_output"].shape == (2, 6, 16) and len(outputs["encoder_outputs"]) == 3
    assert encoder.is_head_pruned
    full = kbert.Encoder(**pruned_kwargs(heads_per_layer=None))
    removed_heads = 3 + 1
    assert full.count_params() - encoder.count_params() == removed_heads * (3 * (16 * 4 + 4) + 4 * 16)
    assert encoder.count_params() == encoder_parameter_count(**encoder.get_config())


def test_heads_per_layer_config_and_save_round_trip(tmp_path):
    encoder = kbert.Encoder(**pruned_kwargs())
    assert encoder.get_config()["heads_per_layer"] == [4, 1, 3]
    run_config_round_trip(encoder, encoder_inputs())
    path = str(tmp_path / "pruned.keras")
    encoder.save(path)
    restored = keras.saving.load_model(path)
    assert restored.heads_per_layer == [4, 1, 3]
    assert_all_close(encoder(encoder_inputs()), restored(encoder_inputs()), atol=0)


def test_every_head_kept_is_the_unpruned_encoder():
    keras.utils.set_random_seed(5)
    plain = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0)
    same = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0, heads_per_layer=[2, 2])
    assert plain.heads_per_layer is None and not plain.is_head_pruned and not same.is_head_pruned
    assert [w.path for w in same.weights] == [w.path for w in plain.weights]
    assert [type(block) for block in same.transformer_layers] == [TransformerBlock] * 2
    same.set_weights(plain.get_weights())
    assert_all_close(plain(encoder_inputs()), same(encoder_inputs()), atol=0)
    # A pruned layer's variables have the paths, and the order, of a full one.
    pruned = kbert.Encoder(**tiny_encoder_kwargs(), heads_per_layer=[2, 1])
    assert [w.path for w in pruned.weights] == [w.path for w in plain.weights]


@pytest.mark.parametrize(
    "heads_per_layer, message",
    [
        ([4, 1], r"one head count per layer \(3\), got 2: \[4, 1\]"),
        ([4, 0, 3], r"`heads_per_layer\[1\]` must be an integer from 1 to `num_heads` \(4\), got 0"),
        ([4, 5, 3], r"`heads_per_layer\[1\]` must be an integer from 1 to `num_heads` \(4\), got 5"),
        ([4, 1.5, 3], r"`heads_per_layer\[1\]` must be an integer"),
        (4, "must be a list of 3 integers, got 4"),
    ],
)
def test_bad_heads_per_layer_is_named(heads_per_layer, message):
    with pytest.raises(ValueError, match=message):
        kbert.Encoder(**pruned_kwargs(heads_per_layer=heads_per_layer))


def test_heads_per_layer_is_refused_with_shared_layers():
    with pytest.raises(ValueError, match="`heads_per_layer` is not supported with shared layers"):
        kbert.Encoder(**albert_kwargs(num_heads=2, heads_per_layer=[2, 1, 2, 2]))


# --- truncated --------------------------------------------------------------------


def three_layer_encoder(**overrides):
    return kbert.Encoder(**{**tiny_encoder_kwargs(), "num_layers": 3, "dropout": 0.0, **overrides})


def test_truncated_to_the_bottom_layers_gives_the_same_layer_outputs():
    teacher = three_layer_encoder()
    inputs = encoder_inputs()
    expected = teacher(inputs)
    for n in (1, 2, 3):
        student = teacher.truncated(range(n))
        assert student.num_layers == n and len(student.transformer_layers) == n
        outputs = student(inputs)
        for got, want in zip(outputs["encoder_outputs"], expected["encoder_outputs"][:n]):
            assert_allclose(got, want, atol=1e-6)
    # All layers: the pooler is the teacher's too.
    assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-6)


def test_truncated_blocks_are_the_chosen_blocks_in_order():
    teacher = three_layer_encoder()
    student = teacher.truncated([0, 2])
    inputs = encoder_inputs()
    embedded = teacher.embed(inputs["token_ids"], inputs["segment_ids"])
    mask = inputs["padding_mask"]
    first = teacher.transformer_layers[0](embedded, padding_mask=mask)
    second = teacher.transformer_layers[2](first, padding_mask=mask)
    outputs = student(inputs)
    assert_allclose(outputs["encoder_outputs"][0], first, atol=1e-6)
    assert_allclose(outputs["encoder_outputs"][1], second, atol=1e-6)
    assert_allclose(outputs["pooled_output"], teacher.pooler_dense(second[:, 0]), atol=1e-6)
    # The weights are copies: training the student leaves the teacher alone.
    before = teacher.transformer_layers[2].get_weights()
    kernel = student.transformer_layers[1].weights[0]
    kernel.assign(kernel + 1.0)
    assert_all_close(teacher.transformer_layers[2].get_weights(), before, atol=0)


def test_truncated_head_pruned_encoder_keeps_the_chosen_layers_heads():
    teacher = kbert.Encoder(**pruned_kwargs(dropout=0.0))
    student = teacher.truncated([1, 2])
    assert student.heads_per_layer == [1, 3]
    inputs = encoder_inputs()
    embedded = teacher.embed(inputs["token_ids"], inputs["segment_ids"])
    first = teacher.transformer_layers[1](embedded, padding_mask=inputs["padding_mask"])
    assert_allclose(student(inputs)["encoder_outputs"][0], first, atol=1e-6)


def test_truncated_config_round_trips_and_keeps_the_rest_of_the_config():
    teacher = three_layer_encoder(embedding_size=8, dtype="mixed_bfloat16")
    student = teacher.truncated([1])
    config = student.get_config()
    assert config["num_layers"] == config["num_groups"] == 1
    unchanged = {"name", "num_layers", "num_groups"}
    assert {k: v for k, v in config.items() if k not in unchanged} == {
        k: v for k, v in teacher.get_config().items() if k not in unchanged
    }
    assert student.name != teacher.name
    assert student.layer_dtype_policy.name == "mixed_bfloat16"
    # Factorized embeddings: the projection is copied too.
    assert_all_close(student.embedding_projection.get_weights(), teacher.embedding_projection.get_weights())
    run_config_round_trip(student, encoder_inputs())


@pytest.mark.parametrize(
    "layers, error, message",
    [
        ([], ValueError, "`layers` is empty"),
        ([0, 3], ValueError, r"Layer index 3 is out of range: this encoder has 3 layers, indices 0 to 2"),
        ([-1], ValueError, r"Layer index -1 is out of range.*indices 0 to 2"),
        ([1, 1], ValueError, r"strictly increasing.*got \[1, 1\]"),
        ([2, 0], ValueError, r"strictly increasing.*got \[2, 0\]"),
        ([0, 1.5], TypeError, r"integers, got 1.5"),
        (["0"], TypeError, r"integers, got '0'"),
        ([True], TypeError, r"integers, got True"),
    ],
)
def test_truncated_names_bad_layers(layers, error, message):
    with pytest.raises(error, match=message):
        three_layer_encoder().truncated(layers)


def test_albert_with_shared_layers_cannot_be_truncated():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(architecture="albert"))
    with pytest.raises(ValueError, match="shares its Transformer blocks across layers.*cannot be truncated"):
        encoder.truncated([0])
