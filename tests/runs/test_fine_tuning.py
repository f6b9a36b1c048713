import json
import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

import kbert
from kbert import cli
from kbert.runs.fine_tuning import build_task_model
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


def test_a_built_encoder_gets_the_attention_dropout_asked_for_and_keeps_its_weights():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.1)
    model = build_task_model("sst2", encoder, vocabulary=TINY_VOCABULARY, sequence_length=16,
                             attention_dropout=0.0)
    assert (model.encoder.dropout, model.encoder.attention_dropout) == (0.1, 0.0)
    assert encoder.attention_dropout == 0.1  # the given encoder is left as it was
    for copied, original in zip(model.encoder.get_weights(), encoder.get_weights(), strict=True):
        np.testing.assert_array_equal(copied, original)
    preset = build_task_model("sst2", "tiny", vocabulary=TINY_VOCABULARY, sequence_length=16,
                              attention_dropout=0.0)
    assert (preset.encoder.dropout, preset.encoder.attention_dropout) == (0.1, 0.0)


# A `kbert train` of a few seconds: a tiny encoder on a few RTE pairs.
TINY_TRAIN = ["train", "rte", "--encoder", "tiny", "--epochs", "1", "--batch-size", "8", "--max-examples", "8",
              "--max-eval-examples", "8", "--sequence-length", "16", "--quiet"]


def run_files(run):
    """The bytes of a run folder's model and metrics, and the seed the metrics name."""
    files = {name: (run / name).read_bytes() for name in ("model.keras", "metrics.json")}
    return files, json.loads(files["metrics.json"])["settings"]["seed"]


def test_a_run_killed_before_its_metrics_leaves_the_earlier_run_whole_and_the_next_cleans_up(tmp_path, capsys):
    run = tmp_path / "run"
    mask = os.umask(0o027)  # the new files and folders must follow it (kbert makes none private)
    try:
        assert cli.main([*TINY_TRAIN, "--out", str(run), "--seed", "0"]) == 0
        finished, seed = run_files(run)
        assert seed == 0
        # A killed save of an older kbert left a temporary model; a user's own ".tmp-" files are not kbert's.
        (run / ".tmp-0badc0de-model.keras").write_bytes(b"half a model")
        users = [run / ".tmp-notes.txt", run / ".tmp-12345678-notes.txt"]
        for path in users:
            path.write_text("a user's file\n")
        # Killed (SIGKILL: no cleanup of any kind) while it evaluates, after the new model was saved.
        killed = subprocess.run([sys.executable, "-c", KILLED_IN_EVALUATION, *TINY_TRAIN, "--out", str(run),
                                 "--seed", "5", "--overwrite"], capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert run_files(run) == (finished, 0)  # the earlier run's model and metrics, together
        capsys.readouterr()

        assert cli.main([*TINY_TRAIN, "--out", str(run), "--seed", "5", "--overwrite"]) == 0
        err = capsys.readouterr().err
        assert (f"{run}: an earlier run was interrupted before it finished; its partial files were removed "
                "(the folder holds the run of its metrics.json).") in err
        assert run_files(run)[1] == 5
        left = sorted(path.name for path in run.iterdir() if path.name.startswith(".tmp-"))
        assert left == sorted(path.name for path in users)
        for path in [run, *run.rglob("*")]:
            assert stat.S_IMODE(path.stat().st_mode) == (0o750 if path.is_dir() else 0o640), path
    finally:
        os.umask(mask)


# `kbert ARGUMENTS...`, killed with SIGKILL when the evaluation starts.
KILLED_IN_EVALUATION = """
import os, signal, sys
import kbert.cli, kbert.runs.fine_tuning
kbert.runs.fine_tuning.evaluate_task = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
kbert.cli.main(sys.argv[1:])
"""




def test_run_settings_are_named_as_settings_in_python_and_as_flags_by_the_command(tmp_path, capsys):
    from kbert.cli.arguments import said_as_flags
    from kbert.runs.fine_tuning import fine_tune, one_class_warning
    from kbert.runs.fine_tuning_settings import FineTuningSettings
    from kbert.io.setting_error import SettingError

    line = one_class_warning({"split": "dev", "examples": 4, "confusion_matrix": [[3, 0], [1, 0]]}, ["ham", "spam"])
    assert "train longer (`epochs`), at a higher `learning_rate`" in line and "--" not in line
    assert "train longer (--epochs), at a higher --learning-rate" in said_as_flags(line)
    # A bad value is refused when the settings are made, naming the setting; the command names its flag.
    with pytest.raises(SettingError, match=r"^`batch_size` must be a positive integer, got 0\.$"):
        FineTuningSettings(batch_size=0)
    with pytest.raises(SettingError, match=r"^`cased` applies to a vocabulary file \(`vocabulary`"):
        fine_tune("sst2", str(tmp_path / "run"), cased=True, max_examples=4)
    with pytest.raises(ValueError, match=r"`epochs=2` conflicts with `settings.epochs=1`"):
        fine_tune("sst2", str(tmp_path / "run"), FineTuningSettings(epochs=1), epochs=2)
    assert cli.main(["train", "sst2", "--cased", "--out", str(tmp_path / "cased")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kbert train: error: --cased applies to a vocabulary file (--vocabulary, ") and "`" not in err
    assert not (tmp_path / "cased").exists()  # refused before the run folder is made
