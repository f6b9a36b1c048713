"""A pretraining run folder's settings record: what a resume is checked against, without training anything."""

import json

import pytest

from kbert.io.setting_error import SettingError
from kbert.runs import pretraining_run
from kbert.runs.pretraining_run import SETTINGS_FILE, check_same_run, corpus_identity, read_record, record_run

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
SETTINGS = {
    "preset": "tiny", "embedding_size": None, "num_groups": None, "attention_dropout": None, "objective": "nsp",
    "sequence_length": 32, "lowercase": True, "vocabulary_size": 60, "batch_size": 8,
    "gradient_accumulation_steps": None, "epochs": 1, "steps_per_epoch": None, "learning_rate": 6e-4,
    "mask_rate": 0.15, "whole_word_masking": False, "max_ngram": 1, "document_boundary": "file", "seed": 0,
}


@pytest.fixture
def run(tmp_path):
    """A run folder with its vocab.txt and settings record, and the corpus it read."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("the cat sat .\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    record_run(str(out), SETTINGS, corpus(tmp_path)())
    return out


def corpus(tmp_path):
    return lambda: corpus_identity([str(tmp_path / "corpus" / "*.txt")])


def test_every_defining_setting_is_recorded_and_checked(run, tmp_path):
    record = read_record(str(run))
    assert record["settings"] == SETTINGS and set(SETTINGS) == set(pretraining_run.DEFINING)
    assert check_same_run(str(run), SETTINGS, corpus(tmp_path)) is None
    # A float said otherwise (the default learning rate is computed as 0.0006000000000000001) is the same.
    assert check_same_run(str(run), {**SETTINGS, "learning_rate": 1e-4 * 768 / 128}, corpus(tmp_path)) is None
    for name in pretraining_run.DEFINING:
        value = SETTINGS[name]
        other = (not value if isinstance(value, bool) else 7 if value is None else value + 1 if isinstance(value, int)
                 else value * 2 if isinstance(value, float) else value + "x")
        # Named as the setting (the record's `lowercase` is `cased`), which the command says as its flag.
        setting = "cased" if name == "lowercase" else name
        with pytest.raises(SettingError, match=f"^`{setting}` .* differs from this run's ") as caught:
            check_same_run(str(run), {**SETTINGS, name: other}, corpus(tmp_path))
        flag = "--" + setting.replace("_", "-")
        assert caught.value.said_as_flags().startswith(f"{flag} ")
        assert caught.value.said_as_flags().endswith("to start a new run, choose another --out.")
    # A vocabulary size where this run's vocabulary was given (None) is not compared.
    assert check_same_run(str(run), {**SETTINGS, "vocabulary_size": None}, corpus(tmp_path)) is None


def test_a_missing_or_broken_record_names_its_file(run, tmp_path):
    path = run / SETTINGS_FILE
    text = path.read_text()
    path.write_text(text[:50])
    with pytest.raises(ValueError, match=f"^{path}: not the JSON that kbert pretrain writes"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))
    record = json.loads(text)
    del record["settings"]["seed"]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"^{path}: the key 'seed' is missing"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))
    path.write_text(json.dumps({**json.loads(text), "format": "other/2"}))
    with pytest.raises(ValueError, match="is not a settings record of kbert pretrain"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))


def test_a_folder_of_an_earlier_version_resumes_with_a_note(run, tmp_path):
    (run / SETTINGS_FILE).unlink()
    # A finished run, or a new folder: nothing to say.
    assert check_same_run(str(run), {**SETTINGS, "batch_size": 64}, corpus(tmp_path)) is None
    (run / "backup").mkdir()
    (run / "backup" / "training_metadata.json").write_text("{}")
    note = check_same_run(str(run), {**SETTINGS, "batch_size": 64}, corpus(tmp_path))
    assert note.startswith(f"{run} records no settings (a run of an earlier kbert version)")
    # Its vocab.txt still decides: another --vocabulary is refused.
    other = tmp_path / "other.txt"
    other.write_text("\n".join(VOCABULARY + ["dog"]) + "\n")
    with pytest.raises(SettingError, match=f"^`vocabulary` {other} differs from {run / 'vocab.txt'}") as caught:
        check_same_run(str(run), SETTINGS, corpus(tmp_path), vocabulary=str(other))
    assert caught.value.said_as_flags().startswith(f"--vocabulary {other} differs")
    same = tmp_path / "same.txt"
    same.write_text("\n".join(VOCABULARY) + "\n")
    assert check_same_run(str(run), SETTINGS, corpus(tmp_path), vocabulary=str(same)) is not None


def test_the_corpus_and_vocabulary_are_the_runs(run, tmp_path):
    (tmp_path / "corpus" / "b.txt").write_text("a new book .\n")
    with pytest.raises(ValueError, match=f"^`corpus` gives {tmp_path / 'corpus' / 'b.txt'}, which this run did not"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))
    (tmp_path / "corpus" / "b.txt").unlink()
    (tmp_path / "corpus" / "a.txt").rename(tmp_path / "corpus" / "c.txt")
    with pytest.raises(ValueError, match=f"^`corpus` does not give {tmp_path / 'corpus' / 'a.txt'}, which this run"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))
    (tmp_path / "corpus" / "c.txt").rename(tmp_path / "corpus" / "a.txt")
    (run / "vocab.txt").unlink()
    with pytest.raises(ValueError, match=f"^{run / 'vocab.txt'}, this run's vocabulary, is missing"):
        check_same_run(str(run), SETTINGS, corpus(tmp_path))
