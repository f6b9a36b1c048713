"""`kbert pretrain` again on a run folder is the same run, and a damaged prepared corpus is named in one line."""

import json

import keras

import kbert
from kbert import cli
from tests.cli.test_cli import pretrain_arguments
from tests.pretraining.pretraining_run import VOCABULARY, write_corpus
from tests.test_case import refusal_line


class InterruptAfterStep(keras.callbacks.Callback):
    """Ctrl-C right after optimizer step `step`: the run stops, its last backup kept."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt


def test_a_resume_with_other_settings_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    write_corpus(tmp_path / "corpus", documents=4, sentences=20)
    out = tmp_path / "run"
    arguments = pretrain_arguments(tmp_path / "corpus", out) + ["--steps-per-epoch", "4", "--backup-every", "2"]
    standard = kbert.callbacks.standard
    monkeypatch.setattr(kbert.callbacks, "standard",
                        lambda *args, **kwargs: standard(*args, **kwargs) + [InterruptAfterStep(3)])
    assert cli.main(arguments) == 130
    monkeypatch.setattr(kbert.callbacks, "standard", standard)
    backup = out / "backup" / "training_metadata.json"
    assert json.loads(backup.read_text())["step"] == 2
    record = json.loads((out / "settings.json").read_text())
    assert record["format"] == "kbert-pretraining-run/1"
    assert {key: record["settings"][key] for key in ("preset", "sequence_length", "batch_size", "objective")} == {
        "preset": "tiny", "sequence_length": 32, "batch_size": 8, "objective": "nsp"}
    assert [path for path, _ in record["corpus"]["files"]] == [
        str(tmp_path / "corpus" / f"doc{number}.txt") for number in range(4)]
    capsys.readouterr()

    other_vocabulary = tmp_path / "other-vocab.txt"
    other_vocabulary.write_text("\n".join(VOCABULARY) + "\n")
    settings = f"({out / 'settings.json'} records the run's settings)"
    refusals = {
        ("--batch-size", "16"): f"--batch-size 16 differs from this run's 8 {settings}",
        ("--sequence-length", "64"): f"--sequence-length 64 differs from this run's 32 {settings}",
        ("--objective", "sop"): f"--objective sop differs from this run's nsp {settings}",
        ("--preset", "mini"): f"--preset mini differs from this run's tiny {settings}",
        ("--whole-word-masking",): f"--whole-word-masking (given) differs from this run's (not given) {settings}",
        ("--learning-rate", "0.01"): f"--learning-rate 0.01 differs from this run's 0.0006 {settings}",
        ("--epochs", "2"): f"--epochs 2 differs from this run's 1 {settings}",
        ("--vocabulary", str(other_vocabulary)):
            f"--vocabulary {other_vocabulary} differs from {out / 'vocab.txt'}, the vocabulary of the run in {out}",
    }
    for flags, expected in refusals.items():
        assert cli.main(arguments + list(flags)) == 2, flags
        line = refusal_line(capsys, "pretrain")
        assert line.startswith(expected), line
        assert "to start a new run, choose another --out" in line
    # The run's own learning rate, given, is no other setting; its vocabulary size is.
    assert cli.main(arguments + ["--learning-rate", "0.0006", "--vocabulary-size", "61"]) == 2
    assert refusal_line(capsys, "pretrain").startswith(f"--vocabulary-size 61 differs from this run's 60 {settings}")

    # A vocab.txt edited in the run folder, and a corpus file changed.
    vocabulary = (out / "vocab.txt").read_text()
    (out / "vocab.txt").write_text(vocabulary + "extra\n")
    assert cli.main(arguments) == 2
    assert refusal_line(capsys, "pretrain").startswith(f"{out / 'vocab.txt'} is not the vocabulary this run began with")
    (out / "vocab.txt").write_text(vocabulary)
    document = tmp_path / "corpus" / "doc0.txt"
    text = document.read_text()
    document.write_text(text + "the cat sat .\n")
    assert cli.main(arguments) == 2
    assert refusal_line(capsys, "pretrain").startswith(f"--corpus gives {document} of {len(text) + 14:,} bytes, which was "
                                         f"{len(text):,} when this run read it")
    document.write_text(text)
    assert json.loads(backup.read_text())["step"] == 2  # nothing was trained, or backed up

    # The same settings resume, and end at the run's last step.
    assert cli.main(arguments) == 0
    assert "Resuming from the backup in " in capsys.readouterr().out
    pretrainer = kbert.load_model(str(out / "pretrainer.keras"))
    assert int(pretrainer.optimizer.iterations.numpy()) == 4


def test_a_damaged_prepared_corpus_is_named_in_one_line(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=2, sentences=10)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    prepared = tmp_path / "prepared"
    assert cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"), "--vocabulary",
                     str(tmp_path / "vocab.txt"), "--out", str(prepared), "--sequence-length", "32",
                     "--examples-per-shard", "5"]) == 0
    capsys.readouterr()
    shard = prepared / "pairs-00001.tfrecord"
    data = shard.read_bytes()

    def pretrain():
        return cli.main(["pretrain", "--corpus", str(prepared), "--out", str(tmp_path / "run"), "--preset", "tiny",
                         "--batch-size", "8", "--steps-per-epoch", "2", "--quiet"])

    # Cut short: refused before anything is built or trained.
    shard.write_bytes(data[:-10])
    assert pretrain() == 2
    assert refusal_line(capsys, "pretrain") == (f"{shard} is {len(data) - 10:,} bytes, and {prepared / 'metadata.json'} records "
                                  f"{len(data):,}: the shard was cut short, and would give other pairs than the "
                                  "folder's; prepare the corpus again.")
    assert not (tmp_path / "run").exists()
    # Corrupt, at its size: found as the first batch is read, and named (TensorFlow's error names no file).
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2] ^= 0xFF
    shard.write_bytes(bytes(corrupt))
    assert pretrain() == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"kbert pretrain: error: {shard}: record ") and "cannot be read (corrupted record" in line
