"""The task preprocessors: settings, config round trips, forward and reverse steps."""

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.preprocessing.task_preprocessor import run_by_length
from tests.test_case import TINY_VOCABULARY, assert_all_close, run_preprocessing_equivalence


def packer(sequence_length=16):
    return kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)


PREPROCESSORS = {
    "classifier": lambda: kbert.ClassifierPreprocessor(packer(), num_classes=3, class_names=["a", "b", "c"]),
    "embedder": lambda: kbert.EmbedderPreprocessor(packer(), text_pairs=True),
    "tagger": lambda: kbert.TaggerPreprocessor(packer(), labels=["O", "B-X", "I-X"]),
    "question_answerer": lambda: kbert.QuestionAnswererPreprocessor(
        packer(), doc_stride=3, max_question_length=4, max_answer_length=5, n_best=2, null_score_threshold=1.0
    ),
    "multiple_choice": lambda: kbert.MultipleChoicePreprocessor(packer(), num_choices=3),
    "multi_label": lambda: kbert.ClassifierPreprocessor(packer(), num_classes=3, class_names=["a", "b", "c"],
                                                        problem_type="multi_label", thresholds=[0.5, 0.3, 0.9]),
    "regression": lambda: kbert.ClassifierPreprocessor(packer(), num_classes=1, problem_type="regression"),
}


@pytest.mark.parametrize("name", sorted(PREPROCESSORS))
def test_config_round_trips_with_the_settings(name):
    preprocessor = PREPROCESSORS[name]()
    config = preprocessor.get_config()
    restored = preprocessor.__class__.from_config(config)
    assert restored.get_config() == config
    assert restored.tokenizer.get_vocabulary() == TINY_VOCABULARY and restored.sequence_length == 16


def test_classifier_forward_is_the_packer_and_reverse_names_classes():
    preprocessor = PREPROCESSORS["classifier"]()
    texts = tf.constant(["a good film", "the cat"])
    inputs, labels = preprocessor(texts, np.array([2, 0]))
    assert_all_close(inputs, packer()(texts))
    assert labels.tolist() == [2, 0]
    run_preprocessing_equivalence(preprocessor, texts)
    outputs = preprocessor.reverse(tf.constant([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]]))
    assert outputs["label_ids"].numpy().tolist() == [2, 0]
    assert outputs["labels"].numpy().tolist() == [b"c", b"a"]
    np.testing.assert_allclose(outputs["probabilities"].numpy().sum(-1), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match=r"Labels must be in \[0, 3\); label 3 at index 1"):
        preprocessor.examples(["a", "b"], [0, 3])


def test_multi_label_targets_are_lists_of_names_and_answers_each_label_at_its_threshold():
    preprocessor = PREPROCESSORS["multi_label"]()
    _, indicators = preprocessor(["a good film", "the cat", "a"], [["a", "c"], [], [1]])
    assert indicators.tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match=r"Label 'd' at index 1 is not one of this classifier's classes"):
        preprocessor.examples(["x", "y"], [["a"], ["b", "d"]])
    outputs = preprocessor.reverse(tf.constant([[0.0, -0.5, 3.0], [-4.0, 0.0, 1.0]]))  # sigmoid: .5 .38 .95, ...
    assert outputs["label_mask"].numpy().tolist() == [[1, 1, 1], [0, 1, 0]]
    assert outputs["labels"].numpy().tolist() == [[b"a", b"b", b"c"], [b"b", b"", b""]]
    with pytest.raises(ValueError, match="between 0 and 1"):
        preprocessor.set_thresholds([0.5, 1.0, 0.2])


def test_regression_targets_are_finite_numbers_and_the_answer_a_score():
    preprocessor = PREPROCESSORS["regression"]()
    _, scores = preprocessor(["a", "b"], ["3.8", 1])
    assert scores.tolist() == pytest.approx([3.8, 1.0])
    with pytest.raises(ValueError, match=r"finite; nan at index 1"):
        preprocessor.examples(["a", "b"], [1.0, float("nan")])
    assert preprocessor.reverse(tf.constant([[2.5], [-1.0]]))["scores"].numpy().tolist() == [2.5, -1.0]
    with pytest.raises(ValueError, match="one output"):
        kbert.ClassifierPreprocessor(packer(), num_classes=2, problem_type="regression")


def test_text_pairs_are_recorded_from_the_first_texts_and_name_the_serving_inputs():
    preprocessor = kbert.ClassifierPreprocessor(packer(), num_classes=2)
    with pytest.raises(ValueError, match="pass text_pairs=False or text_pairs=True"):
        preprocessor.serving_inputs()
    preprocessor.examples((["a"], ["b"]), [1])
    assert preprocessor.text_pairs is True
    assert [name for name, _ in preprocessor.serving_inputs()] == ["text", "text_pair"]
    # An embedder serves single texts unless told.
    assert kbert.EmbedderPreprocessor(packer()).serving_inputs() == [("text", [None])]


def test_multiple_choice_packs_each_choice_with_its_context():
    preprocessor = PREPROCESSORS["multiple_choice"]()
    inputs = preprocessor((tf.constant(["the cat"]), tf.constant([["sat", "a dog", "now"]])))
    assert inputs["token_ids"].shape == (1, 3, 16)
    flat = packer()((tf.constant(["the cat"] * 3), tf.constant(["sat", "a dog", "now"])))
    np.testing.assert_array_equal(inputs["token_ids"][0], flat["token_ids"])
    assert preprocessor.reverse(tf.constant([[0.0, 5.0, 1.0]]))["choice_ids"].numpy().tolist() == [1]


def test_tagger_reverse_gives_a_tag_per_word_and_forward_marks_first_pieces():
    preprocessor = PREPROCESSORS["tagger"]()
    inputs, labels, weights = preprocessor([["the", "cats", "sat"]], [["O", "B-X", "O"]])
    # "cats" is "cat ##s": only its first piece carries its label.
    assert weights.numpy()[0, :6].tolist() == [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert labels.numpy()[0, 2] == 1
    tags = preprocessor.reverse(tf.constant([[3.0, 0.0, 0.0], [0.0, 0.0, 2.0]]))["tags"]
    assert tags.numpy().tolist() == [b"O", b"I-X"]


def test_question_answerer_windows_and_decoding_roundtrip():
    preprocessor = PREPROCESSORS["question_answerer"]()
    windows = preprocessor.build_windows(["who sat ?"], ["the cat sat on the mat . a dog sat on the mat ."])
    assert windows["token_ids"].shape[0] >= 2  # a long context gives several windows
    start = tf.where(windows["token_char_starts"] == 4, 10.0, 0.0)  # "cat" starts at character 4
    end = tf.where(windows["token_char_ends"] == 7, 10.0, 0.0)
    answers = preprocessor.decode(start, end, windows)
    assert answers["text"].numpy().tolist() == [b"cat"]
    assert answers["candidate_texts"].shape == (1, 2)  # n_best


def padded_rows(lengths, width=8):
    """Model inputs whose row i holds `lengths[i]` real tokens, each token's id its row and position."""
    positions = np.arange(width)
    mask = (positions < np.asarray(lengths)[:, None]).astype("int32")
    token_ids = (10 * np.arange(len(lengths))[:, None] + positions) * mask
    return {"token_ids": tf.constant(token_ids, tf.int32), "segment_ids": tf.zeros_like(token_ids, tf.int32),
            "padding_mask": tf.constant(mask)}


def test_run_by_length_runs_sorted_rows_cut_to_their_longest_and_restores_their_order():
    inputs = padded_rows([5, 1, 3, 8, 2, 7, 4])
    widths, seen = [], []

    def call(rows):  # eager: the loop runs in Python, so each run is seen
        widths.append(int(rows["token_ids"].shape[-1]))
        seen.append(rows["token_ids"][:, 0].numpy().tolist())
        return tf.cast(tf.reduce_sum(rows["token_ids"], axis=-1, keepdims=True), tf.float32)

    sums = run_by_length(call, inputs, rows_per_run=2)
    # Rows by length: 1 (row 1), 2 (row 4) | 3 (row 2), 4 (row 6) | 5 (row 0), 7 (row 5) | 8 (row 3).
    assert seen == [[10, 40], [20, 60], [0, 50], [30]]
    assert widths == [2, 4, 7, 8]
    np.testing.assert_array_equal(sums.numpy()[:, 0], tf.reduce_sum(inputs["token_ids"], axis=-1).numpy())


def test_run_by_length_pads_per_token_outputs_back_and_equals_one_call_in_a_graph():
    inputs = padded_rows([5, 1, 3, 8, 2, 7])

    def call(rows):
        mask = tf.cast(rows["padding_mask"], tf.float32)
        return {"positions": tf.cast(rows["token_ids"] % 10, tf.float32) * mask, "counts": tf.cumsum(mask, axis=-1) * mask}

    traced = tf.function(lambda x: run_by_length(call, x, output_names=("positions", "counts"), per_token=True,
                                                 rows_per_run=4))
    outputs = traced(inputs)
    assert outputs["positions"].shape == outputs["counts"].shape == (6, 8)  # zero-padded to the inputs' width
    assert_all_close(outputs, call(inputs))


def test_run_by_length_takes_choices_an_empty_request_and_rows_without_tokens():
    # (questions, choices, length): a question is as long as its longest choice.
    rows = padded_rows([1, 6, 2, 2, 3, 1])
    inputs = {name: tf.reshape(value, [3, 2, 8]) for name, value in rows.items()}
    widths = []

    def call(rows):
        widths.append(int(rows["padding_mask"].shape[-1]))
        return tf.cast(tf.reduce_sum(rows["padding_mask"], axis=-1), tf.float32)

    counts = run_by_length(call, inputs, rows_per_run=1)
    assert widths == [2, 3, 6]
    np.testing.assert_array_equal(counts.numpy(), [[1, 6], [2, 2], [3, 1]])
    # A row with no real token keeps the whole width; an empty request gives no rows.
    widths.clear()
    run_by_length(call, padded_rows([0, 2]), rows_per_run=1)
    assert widths == [2, 8]
    assert run_by_length(call, padded_rows([])).shape == (0,)
