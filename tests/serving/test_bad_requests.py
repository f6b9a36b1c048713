"""Bad requests to an exported model get a clear error, and the model keeps serving."""

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
