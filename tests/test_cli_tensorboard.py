"""What `kbert train` shows in TensorBoard, read back with its loaders (`kbert pretrain`: test_cli.py)."""

import json

import pytest

from kbert import cli
from tests.callbacks.event_files import hparams_sessions, images, scalars, texts


def test_train_draws_train_and_validation_curves_confusion_matrices_and_hparams(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", "sst2", "--encoder", "tiny", "--out", str(out), "--epochs", "2",
                     "--max-examples", "24", "--max-eval-examples", "16", "--batch-size", "8",
                     "--sequence-length", "16", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["split"] == metrics["validation_split"] == "dev" and metrics["examples"] == 16
    logs = out / "tensorboard"

    # 3 steps an epoch: no epoch ends on a multiple of the 50 steps between batch summaries.
    train = scalars(logs / "train")
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_learning_rate"):
        assert sorted(train[tag]) == [0, 1]
    assert train["epoch_loss"][1] == pytest.approx(metrics["final_train_loss"], rel=1e-6)
    validation = scalars(logs / "validation")
    for tag in ("epoch_loss", "epoch_accuracy", "macro_f1", "precision/positive", "recall/negative"):
        assert sorted(validation[tag]) == [0, 1]
    # Validation runs on the examples the evaluation scores, with the final model at epoch 1.
    assert validation["epoch_accuracy"][1] == pytest.approx(metrics["accuracy"], rel=1e-6)
    positive = metrics["per_class"]["positive"]
    assert validation["precision/positive"][1] == pytest.approx(positive["precision"], rel=1e-6)
    assert sorted(images(logs / "validation")["confusion_matrix"]) == [0, 1]
    assert "negative" in texts(logs / "validation")["classification_report"][1]

    sessions = hparams_sessions(logs)
    assert list(sessions) == ["hparams"]
    hparams, values = sessions["hparams"]["hparams"], sessions["hparams"]["metrics"]
    assert hparams["task"] == "sst2" and hparams["epochs"] == 2 and hparams["batch_size"] == 8
    assert hparams["learning_rate"] == pytest.approx(metrics["settings"]["learning_rate"])
    assert hparams["max_examples"] == 24 and hparams["sequence_length"] == 16
    assert values["dev_accuracy"] == pytest.approx(metrics["accuracy"], rel=1e-6)
    assert values["val_accuracy"] == pytest.approx(metrics["accuracy"], rel=1e-6)
    assert values["loss"] == pytest.approx(metrics["final_train_loss"], rel=1e-6)
    assert {"val_loss", "dev_f1", "dev_macro_f1"} <= set(values) and "learning_rate" not in values
