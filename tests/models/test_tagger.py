import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.data import task_dataset
from kbert.models.optimization import WarmupLinearDecay
from tests.test_case import numpy, run_config_round_trip, run_task_test, tiny_encoder_kwargs, TINY_VOCABULARY

LABELS = ["O", "B-ANIMAL", "I-ANIMAL", "B-THING", "I-THING"]
SENTENCES = [
    ["the", "cats", "sat", "on", "the", "mat"],
    ["a", "dog", "sat"],
    ["free", "prize", "now", "!"],
    ["see", "you", "soon"],
]
TAGS = [
    ["O", "B-ANIMAL", "O", "O", "O", "B-THING"],
    ["O", "B-ANIMAL", "O"],
    ["B-THING", "I-THING", "O", "O"],
    ["O", "O", "O"],
]


def tiny_tagger(sequence_length=12, **kwargs):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    return kbert.Tagger(encoder, labels=LABELS, preprocessor=preprocessor, **kwargs)


@pytest.mark.all_backends
def test_task_harness(tmp_path):
    model = tiny_tagger()
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(zip(SENTENCES, TAGS)),
        output_signature=(tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)),
    )
    restored, logits = run_task_test(model, SENTENCES, TAGS, tmp_path, dataset=dataset,
                                     request={"text": [" ".join(s) for s in SENTENCES]})
    assert [array.shape for array in logits] == [(len(s), len(LABELS)) for s in SENTENCES]
    assert restored.labels == LABELS
    assert [len(tags) for tags in restored.tag(SENTENCES)] == [len(s) for s in SENTENCES]


def token(model, token_id):
    return model.preprocessor.tokenizer.id_to_token(token_id)


@pytest.fixture(scope="module")
def model():
    """An untrained tiny tagger, shared by the tests that only need one."""
    return tiny_tagger(sequence_length=10)


@pytest.fixture(scope="module")
def trained():
    """A tiny tagger that has learned SENTENCES (seeded: the test must not depend on the draw)."""
    keras.utils.set_random_seed(0)
    model = tiny_tagger(sequence_length=10, dropout=0.0)
    model.compile(learning_rate=3e-3)
    history = model.fit(SENTENCES * 24, TAGS * 24, batch_size=8, epochs=8, verbose=0)
    return model, history.history["loss"]


def test_labels_sit_on_first_pieces_of_the_built_dataset(model):
    sentences = [["the", "cats", "sat"], ["dogs", "sitting", ""]]  # cat ##s, dog ##s, [UNK]s
    tags = [["O", "B-ANIMAL", "O"], ["B-ANIMAL", "O", "B-THING"]]
    (x, y, weight), = list(task_dataset(model.preprocessor, sentences, tags, batch_size=2))
    tokens = [[token(model, i) for i in row] for row in numpy(x["token_ids"])]
    # Padded to the longest window rounded up to 8, not to sequence_length 10.
    assert tokens[0] == ["[CLS]", "the", "cat", "##s", "sat", "[SEP]", "[PAD]", "[PAD]"]
    # "sitting" is not in the vocabulary: one [UNK]; the empty word gets an [UNK] too.
    assert tokens[1] == ["[CLS]", "dog", "##s", "[UNK]", "[UNK]", "[SEP]", "[PAD]", "[PAD]"]
    np.testing.assert_array_equal(numpy(weight), [[0, 1, 1, 0, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(numpy(y), [[0, 0, 1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 3, 0, 0, 0]])
    np.testing.assert_array_equal(numpy(x["padding_mask"]).sum(-1), [6, 6])
    assert not numpy(x["segment_ids"]).any()


def test_training_batches_group_sentences_of_similar_length():
    model = tiny_tagger(sequence_length=32)
    counts = np.random.default_rng(0).integers(1, 25, size=200)
    sentences = [["cat"] * int(n) for n in counts]
    tags = [["B-ANIMAL"] + ["I-ANIMAL"] * (int(n) - 1) for n in counts]
    dataset = task_dataset(model.preprocessor, sentences, tags, batch_size=10, shuffle=True)
    assert int(dataset.cardinality()) == 20
    seen, padded = [], 0
    for x, y, weight in dataset:
        seen.extend(numpy(weight).sum(axis=1).astype(int))
        padded += numpy(x["padding_mask"]).size
        # The tags stay with their words: B on the first word only.
        assert ((numpy(y) == 1).sum(axis=1) == 1).all()
    assert sorted(seen) == sorted(counts.tolist())  # every sentence once
    assert padded < 0.7 * 200 * 32  # random batches of 10 would nearly all reach 32


def test_long_sentence_is_split_into_windows_and_put_back():
    model = tiny_tagger(sequence_length=8)  # 6 pieces per window
    #         1      2+1        1     1     1      2         1    2          1
    words = ["the", "cats", "sat", "on", "the", "mats", "!", "dogs", "sat"]
    (x, y, weight), = list(task_dataset(model.preprocessor, [words], [["O"] * len(words)]))
    tokens = [[token(model, i) for i in row if i] for row in numpy(x["token_ids"])]
    assert tokens == [
        ["[CLS]", "the", "cat", "##s", "sat", "on", "the", "[SEP]"],
        ["[CLS]", "mat", "##s", "!", "dog", "##s", "sat", "[SEP]"],
    ]
    assert numpy(weight).sum() == len(words)  # every word labelled once
    # Every word gets a tag, and its scores are those of its own window.
    (logits,) = model.predict([words], verbose=0)
    assert logits.shape == (9, len(LABELS))
    windows = model.predict([words[:5], words[5:]], verbose=0)
    np.testing.assert_allclose(logits, np.concatenate(windows), atol=1e-5)
    long_sentence = words * 20
    tags = model.tag([long_sentence, ["a"], long_sentence[:7]])
    assert [len(t) for t in tags] == [180, 1, 7]
    assert all(tag in LABELS for sentence in tags for tag in sentence)


def test_a_word_longer_than_a_window_keeps_its_place():
    model = tiny_tagger(sequence_length=5)  # 3 pieces per window
    words = ["a", "cat" + "s" * 10, "sat", "", "\x00"]  # 11 pieces; nothing; a dropped character
    (x, y, weight), = list(task_dataset(model.preprocessor, [words], [["O", "B-ANIMAL", "O", "O", "O"]]))
    tokens = [[token(model, i) for i in row if i] for row in numpy(x["token_ids"])]
    assert tokens == [
        ["[CLS]", "a", "[SEP]"],
        ["[CLS]", "cat", "##s", "##s", "[SEP]"],
        ["[CLS]", "sat", "[UNK]", "[UNK]", "[SEP]"],
    ]
    assert numpy(y)[1, 1] == 1 and numpy(weight).sum() == 5
    assert len(model.predict([words], verbose=0)[0]) == 5


@pytest.mark.slow
def test_learns_a_small_tagging_task(trained):
    model, losses = trained
    assert losses[-1] < losses[0] / 2
    assert model.tag(SENTENCES) == TAGS
    assert model.evaluate(SENTENCES, TAGS, verbose=0, return_dict=True)["accuracy"] == 1.0
    scores = model.evaluate_entities(SENTENCES, TAGS)
    assert (scores["f1"], scores["support"]) == (1.0, 4)
    assert scores["per_type"]["THING"]["support"] == 2
    # IOB1 spellings of the true tags score the same (I- may start an entity).
    iob1 = [[t.replace("B-", "I-") for t in tags] for tags in TAGS]
    assert model.evaluate_entities(SENTENCES, iob1)["f1"] == 1.0


@pytest.mark.slow
def test_save_and_load_predict_the_same(trained, tmp_path):
    model, _ = trained
    path = os.path.join(tmp_path, "tagger.keras")
    model.save(path)
    restored = kbert.load_model(path)
    assert type(restored) is kbert.Tagger
    assert restored.labels == LABELS and restored.preprocessor.sequence_length == 10
    for ours, theirs in zip(model.predict(SENTENCES, verbose=0), restored.predict(SENTENCES, verbose=0)):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert restored.tag(SENTENCES) == TAGS
    # The optimizer comes back with its state and schedule, ready to train on.
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations) == 8 * 12
    assert isinstance(restored.optimizer._learning_rate, WarmupLinearDecay)
    history = restored.fit(SENTENCES, TAGS, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_probabilities_agree_with_tags(model):
    probabilities = model.predict_proba(SENTENCES, verbose=0)
    assert [p.shape for p in probabilities] == [(6, 5), (3, 5), (4, 5), (3, 5)]
    np.testing.assert_allclose(np.concatenate(probabilities).sum(-1), 1.0, rtol=1e-5)
    logits = model.predict(SENTENCES, verbose=0)
    np.testing.assert_allclose(np.concatenate(probabilities), tf.nn.softmax(np.concatenate(logits)), atol=1e-6)
    assert [[LABELS[i] for i in p.argmax(-1)] for p in probabilities] == model.tag(SENTENCES)


def test_config_round_trip():
    model = tiny_tagger(dropout=0.3)
    config = model.get_config()
    assert config["preprocessor"]["config"]["labels"] == LABELS and config["dropout"] == 0.3
    inputs, _ = model.preprocessor.pack_words(tf.ragged.constant([["the", "cats"], ["sat"]]))
    restored = run_config_round_trip(model, inputs)
    assert restored.labels == LABELS and restored.dropout == 0.3


def test_pooler_is_frozen_and_fit_does_not_warn(model):
    # Tags come from the sequence output: the pooler gets no gradient, so it
    # is left out of training instead of drawing Keras' missing-gradient warning.
    pooler = {id(w) for w in model.encoder.pooler_dense.weights}
    assert not pooler & {id(w) for w in model.trainable_weights}
    assert pooler <= {id(w) for w in model.non_trainable_weights}
    assert len(model.weights) == len(model.trainable_weights) + len(model.non_trainable_weights)
    before = [numpy(w) for w in model.encoder.pooler_dense.weights]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(SENTENCES, TAGS, batch_size=2, epochs=1, verbose=0)
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    for old, weight in zip(before, model.encoder.pooler_dense.weights):
        np.testing.assert_array_equal(old, numpy(weight))


def built(dataset):
    return [keras.tree.map_structure(lambda t: numpy(t), batch) for batch in dataset]


def test_tags_as_ids_build_the_same_dataset(model):
    ids = [[LABELS.index(t) for t in tags] for tags in TAGS]
    from_ids, from_strings = built(task_dataset(model.preprocessor, SENTENCES, ids)), built(task_dataset(model.preprocessor, SENTENCES, TAGS))
    keras.tree.assert_same_structure(from_ids, from_strings)
    for a, b in zip(keras.tree.flatten(from_ids), keras.tree.flatten(from_strings)):
        np.testing.assert_array_equal(a, b)


def test_accepts_tf_data_batched_or_not(model):
    words = tf.ragged.constant(SENTENCES)
    ids = tf.ragged.constant([[LABELS.index(t) for t in tags] for tags in TAGS])
    unbatched = tf.data.Dataset.from_tensor_slices((words, tf.ragged.constant(TAGS)))
    expected = keras.tree.flatten(built(task_dataset(model.preprocessor, SENTENCES, TAGS)))
    for dataset in (unbatched, tf.data.Dataset.from_tensor_slices((words, ids)).ragged_batch(32)):
        for a, b in zip(keras.tree.flatten(built(task_dataset(model.preprocessor, dataset))), expected):
            np.testing.assert_array_equal(a, b)
    # One weight per sentence in a third component.
    weighted = tf.data.Dataset.from_tensor_slices((words, ids, [0.0, 1.0, 2.0, 0.0]))
    (_, _, weight), = built(task_dataset(model.preprocessor, weighted))
    assert sorted(weight[weight > 0].tolist()) == [1.0] * 3 + [2.0] * 4
    # Predictions from a dataset of sentences, or of (words, tags), batched or not.
    expected = model.predict(SENTENCES, verbose=0)
    for dataset in (tf.data.Dataset.from_tensor_slices(words), unbatched.ragged_batch(3)):
        for ours, theirs in zip(model.predict(dataset, verbose=0), expected):
            np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_unknown_tags_are_refused(model):
    tags = [TAGS[0], ["O", "B-PERSON", "O"], *TAGS[2:]]
    with pytest.raises(ValueError, match=r"Unknown tag 'B-PERSON' \(word 1 of sentence 1\); the tagger's labels are \['O', 'B-ANIMAL'"):
        model.fit(SENTENCES, tags, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices((tf.ragged.constant(SENTENCES), tf.ragged.constant(tags)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="B-PERSON"):
        built(task_dataset(model.preprocessor, dataset))
    ids = tf.data.Dataset.from_tensor_slices((tf.ragged.constant(SENTENCES), tf.ragged.constant([[0, 7]] * 4)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Tag ids must be in \[0, 5\)"):
        built(task_dataset(model.preprocessor, ids))


@pytest.mark.parametrize(
    "sentences, tags, error, message",
    [
        (SENTENCES, [["O"] * 6, ["O"] * 2, ["O"] * 4, ["O"] * 3], ValueError, "Sentence 1 has 3 words but 2 tags"),
        (SENTENCES, TAGS[:3], ValueError, "Got 4 sentences but 3 lists of tags"),
        (SENTENCES, [[0] * 6, [0, 5, 0], [0] * 4, [0] * 3], ValueError, r"Tag id 5 \(word 1 of sentence 1\) is not in \[0, 5\)"),
        (SENTENCES, [[0] * 6, [0, 0.5, 0], [0] * 4, [0] * 3], TypeError, "Tag 1 of sentence 1 is a float"),
        (["the cat sat", ["a"]], [["O"], ["O"]], TypeError, "Sentence 0 is a string, not a list of words"),
        ([["the", 3]], [["O", "O"]], TypeError, "Word 1 of sentence 0 is a int"),
        ([[], []], [[], []], ValueError, "All sentences are empty"),
    ],
)
def test_bad_training_input_is_named(sentences, tags, error, message, model):
    with pytest.raises(error, match=message):
        model.fit(sentences, tags, verbose=0)


def test_empty_sentences_and_sample_weights(model):
    # An empty sentence has nothing to learn from, and gets no tags back.
    windows = built(task_dataset(model.preprocessor, [[], SENTENCES[1], []], [[], TAGS[1], []]))
    assert [batch[0]["token_ids"].shape[0] for batch in windows] == [1]
    assert model.tag([[], SENTENCES[1], []]) == [[], model.tag([SENTENCES[1]])[0], []]
    assert [len(logits) for logits in model.predict([[], SENTENCES[1], []], verbose=0)] == [0, 3, 0]
    assert model.predict([], verbose=0) == []
    # Sentence weights reach every word of the sentence, word weights each word.
    (_, _, weight), = built(task_dataset(model.preprocessor, SENTENCES[:2], TAGS[:2], sample_weight=[0.5, [1, 2, 3]]))
    assert sorted(weight[weight > 0].tolist()) == [0.5] * 6 + [1, 2, 3]
    with pytest.raises(ValueError, match="Sentence 1 has 3 words but 2 sample weights"):
        model.fit(SENTENCES[:2], TAGS[:2], sample_weight=[1, [1, 2]], verbose=0)


def test_predict_input_errors(model):
    with pytest.raises(TypeError, match="Sentence 0 is a string"):
        model.predict(["the", "cat"], verbose=0)
    with pytest.raises(TypeError, match="got a single string"):
        model.predict("the cat", verbose=0)


@pytest.mark.parametrize(
    "labels, error, message",
    [
        (None, TypeError, "must be a list of tag strings"),
        ("O B-X", TypeError, "must be a list of tag strings"),
        (["O"], ValueError, "at least 2 labels"),
        (["O", "B-X", "O"], ValueError, r"\['O'\] repeat"),
        (["O", ""], ValueError, "non-empty string"),
    ],
)
def test_bad_labels_are_named(labels, error, message):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), 8)
    with pytest.raises(error, match=message):
        kbert.Tagger(kbert.Encoder(**tiny_encoder_kwargs()), labels=labels, preprocessor=preprocessor)


def test_tagger_entry_point():
    model = kbert.tagger("tiny", labels=LABELS, vocabulary=TINY_VOCABULARY, sequence_length=16, num_layers=1)
    assert isinstance(model, kbert.Tagger)
    assert model.encoder.num_layers == 1 and model.encoder.hidden_dim == 128
    assert model.preprocessor.sequence_length == 16 and model.preprocessor.tokenizer.lowercase
    assert [len(t) for t in model.predict(SENTENCES, verbose=0)] == [6, 3, 4, 3]
    with pytest.raises(ValueError, match="Give the tag `labels`"):
        kbert.tagger("tiny", vocabulary=TINY_VOCABULARY)
