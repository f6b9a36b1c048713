"""Bad requests to an exported model get a clear error, and the model keeps serving."""

import re

import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def signatures(exported):
    return tf.saved_model.load(exported["classifier"][1]).signatures


def test_a_wrong_dtype_or_a_missing_input_is_refused_by_name(signatures):
    serve = signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a string tensor but is a int32"):
        serve(text=tf.constant([1, 2]))
    with pytest.raises(TypeError, match="text"):
        serve(question=tf.constant(["a"]))
    assert serve(text=tf.constant(["the cat"]))["probabilities"].shape == (1, 2)


def test_token_ids_outside_the_vocabulary_or_too_long_are_refused_with_a_message(signatures, exported):
    model, _ = exported["classifier"]
    by_ids = signatures["from_token_ids"]
    good = model.preprocessor(["the cat"])
    too_big = dict(good, token_ids=good["token_ids"] + 1000)
    with pytest.raises(tf.errors.InvalidArgumentError, match="below the vocabulary size"):
        by_ids(**too_big)
    length = model.encoder.max_sequence_length + 1
    too_long = {name: tf.zeros([1, length], tf.int32) for name in good}
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most 512 tokens"):
        by_ids(**too_long)
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        by_ids(**dict(good, segment_ids=good["segment_ids"][:, :2]))
    assert by_ids(**good)["label_ids"].shape == (1,)


def test_texts_of_a_pair_must_be_as_many(exported):
    serve = tf.saved_model.load(exported["pair_classifier"][1]).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many"):
        serve(text=tf.constant(["a", "b"]), text_pair=tf.constant(["c"]))


def test_a_tf_example_without_the_text_feature_is_refused_by_name(signatures):
    empty = tf.train.Example().SerializeToString()
    with pytest.raises(tf.errors.InvalidArgumentError, match="text"):
        signatures["from_tf_example"](examples=tf.constant([empty]))


def shape_given(shape):
    """The shape as a refused request's message prints it."""
    return re.escape(f"the shape given:] [{' '.join(map(str, shape))}]")


# (2, 1) has as many strings as rows: a check of sizes would let it through.
@pytest.mark.parametrize("shape", [(), (2, 3), (2, 1)])
def test_text_of_another_rank_is_refused_and_the_model_keeps_serving(signatures, shape):
    serve = signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="text must be a 1-D batch of strings, one per example; " + shape_given(shape)):
        serve(text=tf.fill(shape, "the cat"))
    assert serve(text=tf.constant(["the cat", "sat"]))["label_ids"].shape == (2,)


@pytest.fixture(scope="module")
def multiple_choice(exported):
    return tf.saved_model.load(exported["multiple_choice"][1]).signatures["serving_default"]


@pytest.mark.parametrize("shape", [(2,), (1, 1, 2)])
def test_choices_of_another_rank_are_refused(multiple_choice, shape):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="choices must be a 2-D batch of strings, one row per example; " + shape_given(shape)):
        multiple_choice(context=tf.constant(["the cat"] * shape[0]), choices=tf.fill(shape, "sat"))
    good = multiple_choice(context=tf.constant(["the cat"]), choices=tf.constant([["sat", "ran"]]))
    assert good["probabilities"].shape == (1, 2)


def test_tf_examples_or_token_ids_of_another_rank_are_refused(signatures, exported):
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"the cat"]))
    example = tf.train.Example(features=tf.train.Features(feature={"text": feature})).SerializeToString()
    from_examples = signatures["from_tf_example"]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="examples must be a 1-D batch of serialized tf.train.Examples; " + shape_given((1, 2))):
        from_examples(examples=tf.constant([[example, example]]))
    assert from_examples(examples=tf.constant([example]))["label_ids"].shape == (1,)

    by_ids = signatures["from_token_ids"]
    good = exported["classifier"][0].preprocessor(["the cat"])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"token_ids must be 2-D, \(batch, tokens\); " + shape_given((1, 1, 16))):
        by_ids(**{name: value[None] for name, value in good.items()})
    assert by_ids(**good)["label_ids"].shape == (1,)


def test_a_huge_text_costs_what_sequence_length_allows_and_answers_as_its_first_tokens(signatures):
    from tests.memory import current_mb, peak_since_reset, reset_peak

    serve = signatures["serving_default"]
    answer = serve(text=tf.constant(["the cat sat"]))["probabilities"].numpy()
    # Tens of megabytes of spaces between words that fit change nothing.
    padded = "the" + " " * 30_000_000 + "cat\n\t sat" + "\u3000" * 10_000_000
    assert serve(text=tf.constant([padded]))["probabilities"].numpy() == pytest.approx(answer, abs=1e-6)
    # 60 MB of words (15 million): tokenizing them all took gigabytes; only the first ones are read.
    long_text = "the cat sat " * 5_000_000
    first = serve(text=tf.constant([long_text[:2000]]))["probabilities"].numpy()
    reset_peak()  # this test's peak, not the worker's since it started
    before = current_mb()
    assert serve(text=tf.constant([long_text]))["probabilities"].numpy() == pytest.approx(first, abs=1e-6)
    assert peak_since_reset() < before + 1000


def test_a_huge_context_is_read_as_far_as_max_windows_reach_and_answered_from_there(exported):
    from tests.memory import current_mb, peak_since_reset, reset_peak

    model, path = exported["question_answerer"]
    serve = tf.saved_model.load(path).signatures["serving_default"]

    def answer(context):
        served = serve(question=tf.constant(["who sat?"]), context=tf.constant([context]))
        return [served[name].numpy()[0] for name in ("text", "start", "end")]

    # A context that fits, whatever its spaces: the answer and its offsets, into the context as sent.
    context = "the cat sat on the mat ."
    spaced = context.replace("sat", "sat" + " " * 5_000_000)
    text, start, end = answer(spaced)
    assert spaced[start:end] == text.decode() and text.split() == answer(context)[0].split()
    # 60 MB of words: only the characters of the first `max_windows` windows are read.
    budget = model.preprocessor.max_windows * model.preprocessor.doc_stride + model.preprocessor.sequence_length
    long_context = "the cat sat " * 5_000_000
    first_part = answer(long_context[: budget * 12])  # the same first windows
    reset_peak()  # this test's peak, not the worker's since it started
    before = current_mb()
    assert answer(long_context) == first_part
    assert peak_since_reset() < before + 1000


def test_a_huge_text_to_a_tagger_is_tagged_as_far_as_max_windows_reach(exported):
    from tests.memory import current_mb, peak_since_reset, reset_peak

    model, path = exported["tagger"]
    serve = tf.saved_model.load(path).signatures["serving_default"]
    max_words = model.preprocessor.max_windows * (model.preprocessor.sequence_length - 2)
    # A text that fits, whatever its spaces: the same tags, offsets into the text as sent.
    spaced = "the" + " " * 5_000_000 + "cat sat"
    tagged, plain = serve(text=tf.constant([spaced])), serve(text=tf.constant(["the cat sat"]))
    assert tagged["tags"].numpy().tolist() == plain["tags"].numpy().tolist()
    assert tagged["word_starts"].numpy()[0].tolist() == [0, 5_000_003, 5_000_007]
    # 60 MB of words: the first `max_words` are tagged, as in a text of those words alone.
    reset_peak()  # this test's peak, not the worker's since it started
    before = current_mb()
    tagged = serve(text=tf.constant(["the cat sat " * 5_000_000]))
    assert peak_since_reset() < before + 1000
    first = serve(text=tf.constant(["the cat sat " * (max_words // 3)]))
    assert int(tagged["word_counts"].numpy()[0]) == int(first["word_counts"].numpy()[0]) == max_words
    assert tagged["tags"].numpy().tolist() == first["tags"].numpy().tolist()
