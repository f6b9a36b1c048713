import pytest
import tensorflow as tf

import kbert
from kbert.pretraining.pretraining_data import PretrainingData
from kbert.pretraining.pretrainer import _batch_stream
from tests.pretraining.test_pretrainer import pretraining_batch, tiny_pretrainer

BATCHES = 3


@pytest.fixture
def batches():
    return tf.data.Dataset.from_tensors(pretraining_batch()).repeat(BATCHES)


class RecordedStream:
    """A stream that notes where each read starts."""

    def __init__(self, batches):
        self.batches = batches
        self.starts = []

    def __call__(self, start_batch=0, input_context=None):
        self.starts.append(start_batch)
        return self.batches.repeat().skip(start_batch)


def test_is_the_dataset_of_its_batches_with_its_fields(batches):
    stream = RecordedStream(batches)
    data = PretrainingData(batches, objective="nsp", num_examples=4 * BATCHES, stream=stream)
    assert isinstance(data, tf.data.Dataset)
    assert int(data.cardinality()) == BATCHES and data.element_spec == batches.element_spec
    assert len(list(data.take(2))) == 2
    assert (data.objective, data.num_examples, data.stream, data.epoch_counter) == ("nsp", 12, stream, None)
    # The names of the attributes a plain dataset carried before.
    assert (data.kbert_objective, data.kbert_num_examples, data.kbert_stream) == ("nsp", 12, stream)
    with pytest.raises(ValueError, match="`objective` must be one of"):
        PretrainingData(batches, objective="mlm")


def test_fit_reads_the_stream_of_the_data_or_of_the_data_repeated(batches):
    stream = RecordedStream(batches)
    data = PretrainingData(batches, objective="nsp", stream=stream)
    assert _batch_stream(data, None) == (stream, BATCHES)
    assert _batch_stream(data.repeat(), None) == (stream, BATCHES)
    assert _batch_stream(data.take(1), None)[0] is not stream  # another length: read as it is
    pretrainer = tiny_pretrainer()
    pretrainer.compile()
    pretrainer.fit(data, epochs=2, verbose=0)
    assert stream.starts == [0] and int(pretrainer.optimizer.iterations) == 2 * BATCHES


def test_fit_names_the_objective_of_data_made_for_another(batches):
    pretrainer = kbert.Pretrainer(tiny_pretrainer().encoder, objective="sop")
    data = PretrainingData(batches, objective="nsp")
    for fed in (data, data.repeat()):
        with pytest.raises(ValueError, match=r"made for objective='nsp'.*objective='sop'"):
            pretrainer.fit(fed, epochs=1, steps_per_epoch=1, verbose=0)


def test_pretraining_dataset_returns_pretraining_data(tmp_path):
    for i in range(2):
        (tmp_path / f"doc{i}.txt").write_text("the cat sat on the mat .\na dog sat .\n" * 3)
    vocabulary = kbert.learn_vocabulary([str(tmp_path / "*.txt")], vocabulary_size=40, verbose=False)
    data = kbert.pretraining_dataset(str(tmp_path / "*.txt"), vocabulary=vocabulary, sequence_length=12,
                                     batch_size=2, seed=0, verbose=False, objective="none")
    assert isinstance(data, PretrainingData) and data.objective == "none"
    assert int(data.cardinality()) == -(-data.num_examples // 2)
    assert data.stream.splits_by_file is False
