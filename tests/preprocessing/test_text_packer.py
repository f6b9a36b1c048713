import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

import kbert
from tests.preprocessing.conftest import assert_packed, run_pair_preprocessing_equivalence
from tests.test_case import (
    TINY_VOCABULARY,
    run_config_round_trip,
    run_preprocessing_equivalence,
)


def ids_of(tokens):
    """Hand-written expected ids: the position of each token in the vocabulary."""
    return [TINY_VOCABULARY.index(token) for token in tokens]


def to_lists(outputs):
    return {name: value.numpy().tolist() for name, value in outputs.items()}


@pytest.fixture(scope="module")
def tokenizer():
    return kbert.Tokenizer(TINY_VOCABULARY)


def make(tokenizer, sequence_length, truncation="longest_first"):
    return kbert.TextPacker(tokenizer, sequence_length=sequence_length, truncation=truncation)


# Packing.


def test_single_text_packing(tokenizer):
    outputs = make(tokenizer, 8)(["The cat sat.", "a dog"])
    assert to_lists(outputs) == {
        "token_ids": [
            ids_of(["[CLS]", "the", "cat", "sat", ".", "[SEP]", "[PAD]", "[PAD]"]),
            ids_of(["[CLS]", "a", "dog", "[SEP]", "[PAD]", "[PAD]", "[PAD]", "[PAD]"]),
        ],
        "segment_ids": [[0] * 8, [0] * 8],
        "padding_mask": [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]],
    }


def test_pair_packing(tokenizer):
    outputs = make(tokenizer, 10)((["a dog"], ["the cats"]))
    assert to_lists(outputs) == {
        "token_ids": [
            ids_of(["[CLS]", "a", "dog", "[SEP]", "the", "cat", "##s", "[SEP]", "[PAD]", "[PAD]"])
        ],
        "segment_ids": [[0, 0, 0, 0, 1, 1, 1, 1, 0, 0]],
        "padding_mask": [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]],
    }


def test_pair_with_an_empty_second_text(tokenizer):
    outputs = make(tokenizer, 6)((["the cat"], [""]))
    assert to_lists(outputs) == {
        "token_ids": [ids_of(["[CLS]", "the", "cat", "[SEP]", "[SEP]", "[PAD]"])],
        "segment_ids": [[0, 0, 0, 0, 1, 0]],
        "padding_mask": [[1, 1, 1, 1, 1, 0]],
    }


def test_pair_given_as_a_list_of_two_batches(tokenizer):
    preprocessor = make(tokenizer, 10)
    as_tuple = preprocessor((["a dog"], ["the cats"]))
    as_list = preprocessor([tf.constant(["a dog"]), tf.constant(["the cats"])])
    assert to_lists(as_list) == to_lists(as_tuple)


def test_outputs_are_int32(tokenizer):
    for inputs in (["the cat"], (["the cat"], ["a dog"]), "the cat"):
        outputs = make(tokenizer, 8)(inputs)
        assert sorted(outputs) == ["padding_mask", "segment_ids", "token_ids"]
        for name, value in outputs.items():
            assert value.dtype == tf.int32, name


# Truncation.


def test_single_text_is_truncated_with_final_sep(tokenizer):
    text = ["the cat sat on the mat"]
    for truncation in ("longest_first", "waterfall"):
        outputs = make(tokenizer, 5, truncation)(text)
        assert to_lists(outputs) == {
            "token_ids": [ids_of(["[CLS]", "the", "cat", "sat", "[SEP]"])],
            "segment_ids": [[0] * 5],
            "padding_mask": [[1] * 5],
        }


def test_shortest_sequence_length_keeps_one_token(tokenizer):
    outputs = make(tokenizer, 3)(["the cat sat"])
    assert outputs["token_ids"].numpy().tolist() == [ids_of(["[CLS]", "the", "[SEP]"])]


def test_longest_first_cuts_the_longer_text(tokenizer):
    preprocessor = make(tokenizer, 8)  # Room for 5 text tokens.
    outputs = preprocessor(
        (["the cat sat on the mat", "a dog"], ["a dog", "the cat sat on the mat"])
    )
    assert outputs["token_ids"].numpy().tolist() == [
        ids_of(["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"]),
        ids_of(["[CLS]", "a", "dog", "[SEP]", "the", "cat", "sat", "[SEP]"]),
    ]
    assert outputs["segment_ids"].numpy().tolist() == [
        [0, 0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1, 1],
    ]


def test_longest_first_cuts_the_first_text_on_a_tie(tokenizer):
    # 3 + 3 tokens for a budget of 5: TF-Text's ShrinkLongestTrimmer cuts the
    # first text (BERT's reference code would cut the second).
    outputs = make(tokenizer, 8)((["the cat sat"], ["a dog sat"]))
    assert outputs["token_ids"].numpy().tolist() == [
        ids_of(["[CLS]", "the", "cat", "[SEP]", "a", "dog", "sat", "[SEP]"])
    ]
    # 5 + 5 for a budget of 6 shrinks both to 3, one token at a time.
    outputs = make(tokenizer, 9)((["the cat sat on the"], ["a dog sat on a"]))
    assert outputs["token_ids"].numpy().tolist() == [
        ids_of(["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "sat", "[SEP]"])
    ]


def test_longest_first_two_texts_in_sequence_length_five(tokenizer):
    outputs = make(tokenizer, 5)((["the cat"], ["a dog"]))
    assert to_lists(outputs) == {
        "token_ids": [ids_of(["[CLS]", "the", "[SEP]", "a", "[SEP]"])],
        "segment_ids": [[0, 0, 0, 1, 1]],
        "padding_mask": [[1] * 5],
    }


def test_waterfall_cuts_the_second_text_first(tokenizer):
    preprocessor = make(tokenizer, 8, "waterfall")
    outputs = preprocessor((["the cat sat", "the cat sat on the mat"], ["a dog sat", "a dog"]))
    assert outputs["token_ids"].numpy().tolist() == [
        ids_of(["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"]),
        # The first text takes the whole budget; the second is left empty.
        ids_of(["[CLS]", "the", "cat", "sat", "on", "the", "[SEP]", "[SEP]"]),
    ]
    assert outputs["segment_ids"].numpy().tolist() == [
        [0, 0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0, 1],
    ]


def test_no_truncation_when_the_texts_fit(tokenizer):
    for truncation in ("longest_first", "waterfall"):
        outputs = make(tokenizer, 8, truncation)((["the cat sat"], ["a dog"]))
        assert outputs["token_ids"].numpy().tolist() == [
            ids_of(["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"])
        ]


# Input shapes.


def test_scalar_input_gives_1d_outputs(tokenizer):
    outputs = make(tokenizer, 6)("the cat")
    assert to_lists(outputs) == {
        "token_ids": ids_of(["[CLS]", "the", "cat", "[SEP]", "[PAD]", "[PAD]"]),
        "segment_ids": [0] * 6,
        "padding_mask": [1, 1, 1, 1, 0, 0],
    }


def test_scalar_pair_gives_1d_outputs(tokenizer):
    outputs = make(tokenizer, 8)((tf.constant("the cat sat on the mat"), tf.constant("a dog")))
    assert to_lists(outputs) == {
        "token_ids": ids_of(["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"]),
        "segment_ids": [0, 0, 0, 0, 0, 1, 1, 1],
        "padding_mask": [1] * 8,
    }


def test_pair_of_unequal_batches_raises(tokenizer):
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many"):
        make(tokenizer, 8)((["the cat", "a dog"], ["a dog"]))


def test_dict_input_raises(tokenizer):
    with pytest.raises(TypeError, match="dict"):
        make(tokenizer, 8)({"a": ["the cat"], "b": ["a dog"]})


# Arguments.


@pytest.mark.parametrize("sequence_length", [2, 1, 0, -5])
def test_sequence_length_below_three_raises(tokenizer, sequence_length):
    with pytest.raises(ValueError, match="sequence_length"):
        make(tokenizer, sequence_length)


def test_sequence_length_too_short_for_a_pair_raises(tokenizer):
    preprocessor = make(tokenizer, 4)
    assert preprocessor(["the cat"])["token_ids"].shape == (1, 4)
    with pytest.raises(ValueError, match="no room for 2 texts"):
        preprocessor((["the cat"], ["a dog"]))


@pytest.mark.parametrize("truncation", ["longest", "round_robin", "", None])
def test_unknown_truncation_raises(tokenizer, truncation):
    with pytest.raises(ValueError, match="truncation"):
        make(tokenizer, 8, truncation)


def test_tokenizer_must_be_a_kbert_tokenizer():
    with pytest.raises(TypeError, match="kbert.Tokenizer"):
        kbert.TextPacker(TINY_VOCABULARY, sequence_length=8)


# Keras layer behaviour.


def test_config_round_trip(tokenizer):
    preprocessor = make(tokenizer, 9, "waterfall")
    restored = run_config_round_trip(preprocessor, tf.constant(["the cats sat.", "a"]))
    assert isinstance(restored.tokenizer, kbert.Tokenizer)
    assert restored.tokenizer.get_vocabulary() == TINY_VOCABULARY
    assert (restored.sequence_length, restored.truncation) == (9, "waterfall")
    run_config_round_trip(
        preprocessor, (tf.constant(["the cat sat on"]), tf.constant(["a dog sat"]))
    )


def test_keras_serialization_round_trip(tokenizer):
    preprocessor = make(tokenizer, 8)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(preprocessor)
    )
    assert isinstance(restored, kbert.TextPacker)
    inputs = (["the cat sat"], ["a dog sat"])
    assert to_lists(restored(inputs)) == to_lists(preprocessor(inputs))


def test_direct_tf_data_and_tf_function_agree(tokenizer):
    run_preprocessing_equivalence(
        make(tokenizer, 8), tf.constant(["the cat sat on the mat.", "", "a dog"])
    )


def test_direct_tf_data_and_tf_function_agree_on_a_scalar(tokenizer):
    outputs = run_preprocessing_equivalence(make(tokenizer, 6), tf.constant("a dog"))
    assert outputs["token_ids"].shape == (6,)


def test_direct_tf_data_and_tf_function_agree_on_pairs(tokenizer):
    # Waterfall truncation, the single-text path, is covered above.
    run_pair_preprocessing_equivalence(
        make(tokenizer, 8, "longest_first"),
        (tf.constant(["the cat sat on the mat", "a", "the cat sat"]),
         tf.constant(["a dog", "the cat sat on the mat", "a dog sat"])),
    )


def graph_op_types(concrete_function):
    graph_def = concrete_function.graph.as_graph_def()
    op_types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        op_types.update(node.op for node in function.node_def)
    return sorted(op_types)


def test_traced_graph_has_no_round_robin_ops(tokenizer):
    # TF Serving's model servers before 2.20 lack TF-Text's RoundRobinTrimmer
    # op; pair truncation does not use it, so exports run on them too.
    preprocessor = make(tokenizer, 16)
    spec = tf.TensorSpec([None], tf.string)
    concrete = tf.function(preprocessor).get_concrete_function((spec, spec))
    op_types = graph_op_types(concrete)
    assert "Placeholder" in op_types
    assert not [op for op in op_types if "RoundRobin" in op], op_types


# Bad input: always exactly `sequence_length` long, [CLS] first, [SEP] there.

BAD_INPUTS = [
    b"",
    b" \t\n\r ",
    b"ab\xff\xfecd",
    b"\xe2\x82",
    "😀🤗❤️".encode(),
    "日本語のテキスト".encode(),
    b"\x00",
    b"the\x00cat\x01\x02\x1f\x7f",
    "\u200b\ufeff".encode(),
    b"[SEP][CLS]",
    ("the cat sat on the mat. " * 5000).encode()[:100_000],
    ("日" * 100_000).encode(),
]


@pytest.fixture(
    scope="module",
    params=["tiny", "bert"],
)
def any_tokenizer(request, tokenizer):
    if request.param == "tiny":
        return tokenizer
    return request.getfixturevalue("bert_tokenizer")


@pytest.mark.parametrize("sequence_length", [3, 16])
def test_bad_single_inputs_are_packed(any_tokenizer, sequence_length):
    preprocessor = make(any_tokenizer, sequence_length)
    outputs = preprocessor(tf.constant(BAD_INPUTS))
    assert outputs["token_ids"].shape == (len(BAD_INPUTS), sequence_length)
    assert_packed(outputs, sequence_length, any_tokenizer)


def test_bad_scalar_inputs_are_packed(any_tokenizer):
    preprocessor = make(any_tokenizer, 8)
    for text in BAD_INPUTS[:-2]:  # The two 100,000-character texts are batched above.
        outputs = preprocessor(tf.constant(text))
        assert outputs["token_ids"].shape == (8,)
        assert_packed(outputs, 8, any_tokenizer)


# `longest_first` on pairs removes one token per loop step (TF-Text's
# ShrinkLongestTrimmer), about 1 ms a token eagerly, so the pairs stay short.
PAIR_BAD_INPUTS = [text[:2_000] for text in BAD_INPUTS]


@pytest.mark.parametrize("truncation", ["longest_first", "waterfall"])
def test_bad_pair_inputs_are_packed(any_tokenizer, truncation):
    preprocessor = make(any_tokenizer, 16, truncation)
    first, second = PAIR_BAD_INPUTS, PAIR_BAD_INPUTS[::-1]
    outputs = preprocessor((tf.constant(first), tf.constant(second)))
    assert outputs["token_ids"].shape == (len(first), 16)
    assert_packed(outputs, 16, any_tokenizer, num_segments=2)
    # Each pair has exactly two [SEP]s, unless a text holds "[SEP]" itself.
    separators = (outputs["token_ids"].numpy() == any_tokenizer.sep_token_id).sum(axis=1)
    has_sep_text = np.array([b"[SEP]" in a or b"[SEP]" in b for a, b in zip(first, second)])
    assert (separators[~has_sep_text] == 2).all()
    assert (separators[has_sep_text] >= 2).all()


def test_long_text_fills_the_whole_sequence(any_tokenizer):
    outputs = make(any_tokenizer, 16)(["the cat sat on the mat. " * 5000])  # 120,000 characters.
    assert outputs["padding_mask"].numpy().tolist() == [[1] * 16]
    assert outputs["token_ids"].numpy()[0, -1] == any_tokenizer.sep_token_id


def test_capping_texts_at_the_budget_keeps_shrink_longest_results():
    # The preprocessor cuts each text to the budget before ShrinkLongestTrimmer
    # (which removes one token per loop step); the kept lengths must not change.
    rng = np.random.default_rng(0)
    for _ in range(100):
        length_a, length_b, budget = (int(v) for v in rng.integers(0, 40, 3))
        budget = max(budget, 1)
        a, b = tf.ragged.constant([[1] * length_a]), tf.ragged.constant([[2] * length_b])
        reference = tf_text.ShrinkLongestTrimmer(budget).trim([a, b])
        capped = tf_text.ShrinkLongestTrimmer(budget).trim([a[:, :budget], b[:, :budget]])
        assert [r.row_lengths().numpy().tolist() for r in capped] == [
            r.row_lengths().numpy().tolist() for r in reference
        ], (length_a, length_b, budget)


def test_a_pair_of_100k_character_texts_is_truncated():
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length=16)
    outputs = preprocessor((["the cat " * 12_500], ["a dog " * 16_700]))
    ids = outputs["token_ids"].numpy()[0].tolist()
    vocabulary = TINY_VOCABULARY
    assert outputs["padding_mask"].numpy().sum() == 16
    assert ids[0] == vocabulary.index("[CLS]") and ids[-1] == vocabulary.index("[SEP]")
    assert ids.count(vocabulary.index("[SEP]")) == 2
    # Equal lengths after the cut: 13 tokens left, the second text gets the extra one.
    assert ids[1:7] == [vocabulary.index(t) for t in ["the", "cat"] * 3]
    assert outputs["segment_ids"].numpy()[0].tolist() == [0] * 8 + [1] * 8
