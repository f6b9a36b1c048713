"""`resolve_encoder`: every form of an encoder argument, and the one error for any other."""

import keras_hub
import pytest

import kbert
from kbert.checkpoints.encoder_argument import ACCEPTED_FORMS, UnknownEncoderError, resolve_encoder, resolve_pretrainer
from kbert.io.setting_error import SettingError
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny pretrainer saved as a `.keras` file and as a `kbert pretrain` run folder, and a checkpoint folder."""
    folder = tmp_path_factory.mktemp("saved")
    pretrainer = kbert.Pretrainer(kbert.Encoder(**tiny_encoder_kwargs()))
    run = folder / "run"
    run.mkdir()
    pretrainer.save(str(run / "pretrainer.keras"))
    (run / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n")
    checkpoint = kbert.save_pretrained(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), folder / "bert")
    return {"keras_file": str(run / "pretrainer.keras"), "run": run, "checkpoint": checkpoint}


def test_a_preset_is_a_fresh_encoder_of_the_vocabulary():
    encoder, tokenizer = resolve_encoder("tiny", TINY_VOCABULARY, num_layers=1, sequence_length=600)
    assert (encoder.num_layers, encoder.vocabulary_size, encoder.max_sequence_length) == (1, 27, 600)
    assert tokenizer.get_vocabulary() == TINY_VOCABULARY
    encoder, tokenizer = resolve_encoder("tiny", vocabulary_size=40)
    assert encoder.vocabulary_size == 40 and tokenizer is None
    with pytest.raises(ValueError, match="Give a `vocabulary` for the preset 'tiny'"):
        resolve_encoder("tiny")


def test_an_encoder_is_itself_and_takes_only_dropout_rates_in_a_copy():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.1)
    assert resolve_encoder(encoder) == (encoder, None)
    copy, tokenizer = resolve_encoder(encoder, TINY_VOCABULARY, attention_dropout=0.0)
    assert copy is not encoder and (copy.dropout, copy.attention_dropout) == (0.1, 0.0)
    assert encoder.attention_dropout == 0.1 and tokenizer.vocabulary_size() == len(TINY_VOCABULARY)
    only_rates = r"\['num_layers'\] apply to presets; .* built already \(it takes dropout, attention_dropout alone\)"
    with pytest.raises(ValueError, match=only_rates):
        resolve_encoder(encoder, num_layers=4)
    with pytest.raises(ValueError, match="Give a `vocabulary`"):
        resolve_encoder(encoder, require_tokenizer=True)
    with pytest.raises(ValueError, match="embeds 27 tokens; 30 are needed"):
        resolve_encoder(encoder, vocabulary_size=30)


def test_a_keras_hub_backbone_is_converted():
    backbone = keras_hub.models.BertBackbone(**tiny_encoder_kwargs(), dropout=0.2)
    encoder, tokenizer = resolve_encoder(backbone, dropout=0.0)
    assert isinstance(encoder, kbert.Encoder) and tokenizer is None
    assert (encoder.num_layers, encoder.dropout) == (2, 0.0)
    with pytest.raises(ValueError, match=r"\['num_layers'\] apply to presets; the BertBackbone .* is built already"):
        resolve_encoder(backbone, num_layers=1)


def test_a_keras_file_and_a_run_folder_hold_an_encoder_or_with_heads_the_pretrainer(saved):
    encoder, tokenizer = resolve_encoder(saved["keras_file"], TINY_VOCABULARY)
    assert isinstance(encoder, kbert.Encoder) and tokenizer.vocabulary_size() == len(TINY_VOCABULARY)
    pretrainer, tokenizer = resolve_pretrainer(saved["run"])  # its vocab.txt
    assert isinstance(pretrainer, kbert.Pretrainer) and tokenizer.get_vocabulary() == TINY_VOCABULARY
    # Asked for before the file is read: a broken file fails on the vocabulary first.
    with pytest.raises(SettingError, match="Give a `vocabulary`"):
        resolve_encoder(saved["run"].parent / "missing.keras", require_tokenizer=True)
    with pytest.raises(FileNotFoundError, match="No model file"):
        resolve_encoder(saved["run"].parent / "missing.keras")


def test_a_checkpoint_brings_its_tokenizer(saved):
    encoder, tokenizer = resolve_encoder(saved["checkpoint"], dropout=0.0, dtype=None)
    assert encoder.dropout == 0.0 and tokenizer.get_vocabulary() == TINY_VOCABULARY
    pretrainer, _ = resolve_pretrainer(saved["checkpoint"])
    assert isinstance(pretrainer, kbert.Pretrainer)
    with pytest.warns(DeprecationWarning, match="use `resolve_pretrainer"):  # the old spelling, for one release
        assert isinstance(resolve_encoder(saved["checkpoint"], heads=True)[0], kbert.Pretrainer)
    with pytest.raises(ValueError, match="brings its own vocabulary"):
        resolve_encoder(saved["checkpoint"], TINY_VOCABULARY)
    with pytest.raises(ValueError, match=r"\['hidden_dim'\] apply to presets; the checkpoint .* is built already"):
        resolve_encoder(saved["checkpoint"], hidden_dim=8)
    with pytest.raises(ValueError, match="exceeds the checkpoint's 32 positions"):
        resolve_encoder(saved["checkpoint"], sequence_length=64)


@pytest.mark.parametrize("argument", ["gigantic", 3])
def test_anything_else_is_one_error_that_lists_the_forms(argument):
    with pytest.raises(UnknownEncoderError) as error:
        resolve_encoder(argument, role="student")
    assert ACCEPTED_FORMS in str(error.value)
    assert isinstance(error.value, ValueError) and isinstance(error.value, TypeError)
    if isinstance(argument, str):  # the name's own line: the presets, and why it is no checkpoint
        assert str(error.value).startswith("Unknown student 'gigantic': the presets are ['tiny'")
        assert "not a checkpoint folder" in str(error.value)
