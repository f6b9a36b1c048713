import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.data import task_dataset
from tests.test_case import TINY_VOCABULARY, run_config_round_trip, run_task_test, tiny_encoder_kwargs

CONTEXTS = ["the cat sat", "a dog", "a good film", "free prize"]
CHOICES = [
    ["on the mat", "a film", "now"],
    ["sat", "see you soon", "the mat"],
    ["good", "bad", "!"],
    ["now !", "soon", "the cat"],
]
LABELS = [0, 0, 1, 0]


def tiny_multiple_choice(num_choices=3, sequence_length=10, architecture="bert", **kwargs):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)
    encoder = kbert.Encoder(**tiny_encoder_kwargs(architecture=architecture))
    return kbert.MultipleChoice(encoder, num_choices=num_choices, preprocessor=preprocessor, **kwargs)


@pytest.mark.all_backends
# ALBERT's encoder on every backend: tests/backend/test_across_backends.py.
@pytest.mark.parametrize("architecture", ["bert", pytest.param("albert", marks=pytest.mark.tensorflow_backend)])
def test_fit_predict_save_and_tf_data(tmp_path, architecture):
    model = tiny_multiple_choice(architecture=architecture)
    dataset = tf.data.Dataset.from_tensor_slices(((CONTEXTS, CHOICES), LABELS))
    restored, logits = run_task_test(model, (CONTEXTS, CHOICES), LABELS, tmp_path, dataset=dataset,
                                     request={"context": CONTEXTS, "choices": CHOICES})
    assert logits.shape == (4, 3)
    assert restored.num_choices == 3
    # A choice's score depends on its context and its own text, not on the other choices.
    # (Scores of a barely trained model differ by ~1e-5; float32 noise is far smaller.)
    reordered = [row[::-1] for row in CHOICES]
    other_contexts = CONTEXTS[1:] + CONTEXTS[:1]
    both = model.predict((CONTEXTS + other_contexts, reordered + CHOICES), verbose=0)
    np.testing.assert_allclose(both[:4], logits[:, ::-1], rtol=0, atol=1e-8)
    assert np.abs(both[4:] - logits).max() > 1e-7

    # A tf.data.Dataset of ((context, choices), label), batched or not (here in one test,
    # so that Keras compiles the training step once).
    unbatched = tf.data.Dataset.from_tensor_slices(((CONTEXTS, CHOICES), LABELS))
    history = model.fit(unbatched.batch(2), epochs=1, verbose=0, validation_data=unbatched)
    assert np.isfinite(history.history["val_loss"][0])
    logits = model.predict(tf.data.Dataset.from_tensor_slices((CONTEXTS, CHOICES)), verbose=0)
    first_batch = next(task_dataset(model.preprocessor, (CONTEXTS, CHOICES)).as_numpy_iterator())
    np.testing.assert_allclose(logits, keras.ops.convert_to_numpy(model(first_batch)), atol=1e-8)


def test_each_choice_is_packed_as_a_pair_with_its_context():
    model = tiny_multiple_choice(num_choices=2, sequence_length=8)
    tokenizer = model.preprocessor.tokenizer
    features = next(iter(task_dataset(model.preprocessor, (["the cat", "a dog"], [["sat", "on the mat"], ["now", "!"]]))))
    assert {name: tuple(value.shape) for name, value in features.items()} == {
        name: (2, 2, 8) for name in ("token_ids", "segment_ids", "padding_mask")
    }
    tokens = [tokenizer.id_to_token(int(i)) for i in features["token_ids"][0, 1]]
    assert tokens == ["[CLS]", "the", "cat", "[SEP]", "on", "the", "mat", "[SEP]"]
    assert features["segment_ids"][0, 1].numpy().tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    tokens = [tokenizer.id_to_token(int(i)) for i in features["token_ids"][1, 0]]
    assert tokens == ["[CLS]", "a", "dog", "[SEP]", "now", "[SEP]", "[PAD]", "[PAD]"]


def test_logits_are_the_scores_of_each_sequence():
    model = tiny_multiple_choice()
    features = next(iter(task_dataset(model.preprocessor, (CONTEXTS, CHOICES))))
    flat = {name: tf.reshape(value, [12, 10]) for name, value in features.items()}
    pooled = model.encoder(flat, training=False)["pooled_output"]
    scores = model.output_dense(pooled).numpy().reshape(4, 3)
    np.testing.assert_allclose(model(features), scores, rtol=1e-6, atol=1e-9)
    probabilities = model.predict_proba((CONTEXTS, CHOICES), verbose=0)
    np.testing.assert_allclose(probabilities, tf.nn.softmax(scores).numpy(), atol=1e-6)
    assert model.choose((CONTEXTS, CHOICES), verbose=0).tolist() == scores.argmax(-1).tolist()


def make_questions(count, seed):
    """Four choices per context; the right one, at a random place, is the only one that says "good"."""
    rng = np.random.default_rng(seed)
    contexts, choices, labels = [], [], []
    for _ in range(count):
        right = int(rng.integers(4))
        wrong = rng.choice(["a bad film", "the mat", "free prize", "see you soon", "a bad cat"], 3, replace=False)
        row = list(wrong)
        row.insert(right, rng.choice(["a good film", "good", "the good cat"]))
        contexts.append(rng.choice(["the cat sat on", "see the", "a dog and", "now"]))
        choices.append(row)
        labels.append(right)
    return contexts, choices, labels


@pytest.mark.slow
def test_learns_which_choice_is_right():
    # Seeded, as the classifier's learning test: a tiny model from random
    # weights does not learn this in every draw within a test's budget. (A
    # right choice that depends on the context, such as the one repeating its
    # word, needs an interaction of the two segments that a tiny model from
    # random weights did not find in 1,000 steps.)
    keras.utils.set_random_seed(0)
    model = tiny_multiple_choice(num_choices=4, sequence_length=10)
    model.compile(learning_rate=3e-3)
    contexts, choices, labels = make_questions(96, seed=1)
    model.fit((contexts, choices), labels, batch_size=8, epochs=4, verbose=0)
    contexts, choices, labels = make_questions(32, seed=2)
    assert np.mean(model.choose((contexts, choices), verbose=0) == labels) >= 0.9


def test_config_round_trip():
    model = tiny_multiple_choice(num_choices=3, dropout=0.2)
    features = next(iter(task_dataset(model.preprocessor, (CONTEXTS, CHOICES))))
    restored = run_config_round_trip(model, features)
    assert (restored.num_choices, restored.dropout, restored.preprocessor.sequence_length) == (3, 0.2, 10)


def test_entry_point():
    model = kbert.multiple_choice("tiny", num_choices=2, vocabulary=TINY_VOCABULARY, sequence_length=16, num_layers=1)
    assert model.encoder.num_layers == 1 and model.num_choices == 2
    assert model.predict((["the cat"], [["sat", "now"]]), verbose=0).shape == (1, 2)


@pytest.mark.parametrize(
    "x, labels, message",
    [
        ((CONTEXTS, [row[:2] for row in CHOICES]), LABELS, "Example 0 has 2 choices; this model takes num_choices=3"),
        ((CONTEXTS, CHOICES[:3] + [["a", "b", "c", "d"]]), LABELS, "Example 3 has 4 choices"),
        ((CONTEXTS, CHOICES[:3]), LABELS, "Got 4 contexts but 3 lists of choices"),
        ((CONTEXTS, CHOICES), [0, 1, 3, 0], r"choice indices in \[0, 3\); label 3 at index 2"),
        ((CONTEXTS, CHOICES), [0, 1], "Got 4 contexts but 2 labels"),
    ],
)
def test_bad_input_is_named(x, labels, message):
    model = tiny_multiple_choice()
    with pytest.raises(ValueError, match=message):
        model.fit(x, labels, verbose=0)


def test_wrong_number_of_choices_in_a_dataset_is_named():
    model = tiny_multiple_choice(num_choices=4)
    dataset = tf.data.Dataset.from_tensor_slices(((CONTEXTS, CHOICES), LABELS))
    with pytest.raises(ValueError, match="3 choices per context; this model takes num_choices=4"):
        model.fit(dataset, verbose=0)
    with pytest.raises(TypeError, match="a tuple \\(contexts, choices\\)"):
        model.predict(CONTEXTS, verbose=0)
    with pytest.raises(TypeError, match="choices of example 1 must be a list of texts"):
        model.predict((CONTEXTS[:2], [["a", "b", "c", "d"], "abcd"]), verbose=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`num_choices` must be an integer of at least 2, got 1"):
        tiny_multiple_choice(num_choices=1)
