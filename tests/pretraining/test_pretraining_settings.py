import dataclasses

import pytest

import kbert
from kbert.pretraining.pretraining_settings import PretrainingSettings
from tests.pretraining.test_dataset import as_numpy, assert_same_batches, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("settings") / "corpus", files=2, sentences=6)


@pytest.fixture(scope="module")
def vocabulary(corpus):
    return kbert.learn_vocabulary(files=[str(corpus / "*.txt")], vocabulary_size=60, verbose=False)


def test_defaults_are_those_of_pretraining_dataset():
    settings = PretrainingSettings()
    assert (settings.batch_size, settings.mask_rate, settings.shuffle_buffer, settings.max_ngram) == (32, 0.15, 10000, 1)
    assert settings.sequence_length is None and settings.seed is None
    assert settings.requested_objective is None
    assert PretrainingSettings(next_sentence=False).requested_objective == "none"


def test_round_trip_through_a_dict_and_replace():
    settings = PretrainingSettings(sequence_length=64, objective="sop", max_ngram=3, seed=7)
    assert PretrainingSettings(**dataclasses.asdict(settings)) == settings
    assert dataclasses.replace(settings, batch_size=8) == PretrainingSettings(
        sequence_length=64, objective="sop", max_ngram=3, seed=7, batch_size=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.batch_size = 8


@pytest.mark.parametrize("options, message", [
    ({"batch_size": 0}, "`batch_size` must be at least 1, got 0."),
    ({"shuffle_buffer": -1}, "`shuffle_buffer` must be at least 0 (0: no shuffle), got -1."),
    ({"document_boundary": "page"}, "`document_boundary` must be one of ('file', 'blank_line'), got 'page'."),
    ({"objective": "mlm"}, "`objective` must be one of ('nsp', 'sop', 'none'), got 'mlm'."),
    ({"objective": "sop", "next_sentence": True}, "`next_sentence=True` contradicts `objective='sop'`"),
    ({"next_sentence_rate": 1.5}, "`next_sentence_rate` must be in [0, 1], got 1.5."),
    ({"sequence_length": 4}, "`sequence_length` 4 leaves no room for text"),
    ({"document_buffer": 0}, "`document_buffer` must be at least 1, got 0."),
])
def test_bad_values_fail_in_one_line_naming_the_value(options, message):
    with pytest.raises(ValueError) as error:
        PretrainingSettings(**options)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_settings_give_the_batches_of_the_same_keywords(corpus, vocabulary):
    options = dict(sequence_length=16, batch_size=4, seed=1, verbose=False, objective="sop", max_ngram=2)
    settings = PretrainingSettings(**options)
    by_settings = kbert.pretraining_dataset(str(corpus), vocabulary, settings)
    by_keywords = kbert.pretraining_dataset(str(corpus), vocabulary=vocabulary, **options)
    assert by_settings.num_examples == by_keywords.num_examples and by_settings.objective == "sop"
    assert_same_batches(as_numpy(by_settings), as_numpy(by_keywords))
    # A keyword may repeat a setting.
    assert kbert.pretraining_dataset(str(corpus), vocabulary, settings, batch_size=4).num_examples


def test_keywords_that_conflict_with_the_settings_or_are_unknown_fail(corpus, vocabulary):
    settings = PretrainingSettings(batch_size=4, verbose=False)
    with pytest.raises(ValueError, match=r"^`batch_size=8` conflicts with `settings.batch_size=4`; give it in one place.$"):
        kbert.pretraining_dataset(str(corpus), vocabulary, settings, batch_size=8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch'"):
        kbert.pretraining_dataset(str(corpus), vocabulary, settings, batch=8)
    with pytest.raises(TypeError, match="`settings` must be a kbert.PretrainingSettings, got 128"):
        kbert.pretraining_dataset(str(corpus), vocabulary, 128)


def test_bad_masking_options_fail_before_the_pass_over_the_corpus(corpus, vocabulary, capsys):
    with pytest.raises(ValueError, match=r"`mask_rate` must be in \(0, 1\], got 2"):
        kbert.pretraining_dataset(str(corpus), vocabulary=vocabulary, sequence_length=16, mask_rate=2)
    assert "Reading the corpus" not in capsys.readouterr().err
