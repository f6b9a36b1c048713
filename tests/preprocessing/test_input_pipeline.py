"""`kbert.data.task_dataset`: the one input pipeline of every task model."""

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.preprocessing.input_pipeline import LENGTH_GROUP_BATCHES, cut_padding, padded_length
from tests.test_case import TINY_VOCABULARY

TEXTS = ["a good film", "a bad film", "the cat sat on the mat", "free prize now !", "see"]
LABELS = [1, 0, 1, 0, 1]


def classifier_preprocessor(sequence_length=16):
    packer = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)
    return kbert.ClassifierPreprocessor(packer, num_classes=2)


def test_batches_are_model_inputs_with_targets_and_a_known_length():
    preprocessor = classifier_preprocessor()
    dataset = kbert.data.task_dataset(preprocessor, TEXTS, LABELS, batch_size=2)
    assert int(dataset.cardinality()) == 3
    batches = list(dataset)
    assert [len(labels) for _, labels in batches] == [2, 2, 1]
    assert np.concatenate([labels for _, labels in batches]).tolist() == LABELS
    first, _ = batches[0]
    assert sorted(first) == ["padding_mask", "segment_ids", "token_ids"]
    # Padded to the batch's longest text, rounded up to 8: "[CLS] a good film [SEP]".
    assert first["token_ids"].shape == (2, 8)
    weighted = list(kbert.data.task_dataset(preprocessor, TEXTS, LABELS, sample_weight=[1, 2, 3, 4, 5]))
    assert weighted[0][2].numpy().tolist() == [1, 2, 3, 4, 5]


def test_shuffled_text_pairs_without_targets_stay_pairs():
    """Grouping by length keeps a pair whole: its second texts never pass for targets."""
    from kbert.preprocessing.task_preprocessor import TaskPreprocessor

    packer = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), 16)
    pairs = (TEXTS, TEXTS[::-1])
    for shuffle in (False, True):
        dataset = kbert.data.task_dataset(TaskPreprocessor(packer), pairs, batch_size=2, shuffle=shuffle)
        assert isinstance(dataset.element_spec, dict)  # model inputs alone
        segments = np.concatenate([batch["segment_ids"].numpy().ravel() for batch in dataset])
        assert set(segments.tolist()) == {0, 1}


def test_shuffled_batches_hold_similar_lengths_and_every_example_once():
    preprocessor = classifier_preprocessor(sequence_length=64)
    rng = np.random.default_rng(0)
    texts = [" ".join(["cat"] * int(n)) for n in rng.integers(1, 60, size=300)]
    labels = np.arange(300) % 2
    dataset = kbert.data.task_dataset(preprocessor, texts, labels, batch_size=10, shuffle=True)
    assert int(dataset.cardinality()) == 30
    assert 300 < 10 * LENGTH_GROUP_BATCHES  # one group: its batches cut the sorted examples
    lengths, spans, padded = [], 0, 0
    for inputs, _ in dataset:
        row_lengths = inputs["padding_mask"].numpy().sum(axis=1)
        lengths.extend(row_lengths.tolist())
        spans += row_lengths.max() - row_lengths.min()
        padded += inputs["token_ids"].shape[0] * inputs["token_ids"].shape[1]
    # Consecutive runs of sorted lengths span the range once in all (random batches: ~50 each).
    assert spans <= 60
    assert sorted(lengths) == sorted(len(t.split()) + 2 for t in texts)  # every text once
    assert padded < 0.7 * 300 * 64


def test_a_dataset_of_raw_examples_batched_or_not_gives_the_same_batches():
    preprocessor = classifier_preprocessor()
    expected = list(kbert.data.task_dataset(preprocessor, TEXTS, LABELS, batch_size=2))
    raw = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS))
    for dataset in (raw, raw.batch(2)):
        got = list(kbert.data.task_dataset(preprocessor, dataset, batch_size=2))
        for (a, y_a), (b, y_b) in zip(got, expected):
            assert y_a.numpy().tolist() == y_b.numpy().tolist()
            for name in a:
                np.testing.assert_array_equal(a[name], b[name])


def test_preprocessed_datasets_pass_through_and_labels_in_a_dataset_are_not_doubled():
    preprocessor = classifier_preprocessor()
    batches = kbert.data.task_dataset(preprocessor, TEXTS, LABELS)
    assert kbert.data.task_dataset(preprocessor, batches) is batches
    with pytest.raises(ValueError, match="put the targets in the dataset"):
        kbert.data.task_dataset(preprocessor, tf.data.Dataset.from_tensor_slices(TEXTS), LABELS)


def test_cut_padding_keeps_an_empty_request_valid():
    inputs = {"padding_mask": tf.zeros([0, 16], tf.int32), "token_ids": tf.zeros([0, 16], tf.int32)}
    assert cut_padding(inputs)["token_ids"].shape == (0, 8)
    assert [padded_length(n, compiles_each_shape=False) for n in (1, 8, 9, 17)] == [8, 8, 16, 24]
    # Where each width compiles a step (JAX): powers of two.
    assert [int(padded_length(n, compiles_each_shape=True)) for n in (1, 8, 9, 17, 64, 65)] == [8, 8, 16, 32, 64, 128]


def test_the_forward_step_is_traced_once_per_batch_structure_and_not_kept_alive():
    import gc
    import weakref

    preprocessor = classifier_preprocessor()
    traces = []
    forward_batch = preprocessor.forward_batch

    def counted(*batch):
        traces.append(len(batch))  # a traced function's Python runs only while it is traced
        return forward_batch(*batch)

    preprocessor.forward_batch = counted
    first = [labels.numpy().tolist() for _, labels in kbert.data.task_dataset(preprocessor, TEXTS, LABELS)]
    again = [labels.numpy().tolist() for _, labels in kbert.data.task_dataset(preprocessor, TEXTS, LABELS)]
    assert first == again == [LABELS]
    list(kbert.data.task_dataset(preprocessor, TEXTS))  # texts alone: another structure
    list(kbert.data.task_dataset(preprocessor, TEXTS, batch_size=2))
    assert traces == [2, 1]
    gone = weakref.ref(preprocessor)
    del preprocessor, counted, forward_batch
    gc.collect()
    assert gone() is None
