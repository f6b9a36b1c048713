import keras
import numpy as np
import pytest

from kbert.callbacks import HParamsLogger, LearningRateLogger, TensorBoard
from tests.callbacks.conftest import tiny_data, tiny_model
from tests.callbacks.event_files import hparams_sessions

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def test_the_dashboard_lists_each_run_with_its_hparams_and_final_metrics(tmp_path):
    histories = {}
    for name, batch_size in (("a", 2), ("b", 4)):
        log_dir = tmp_path / name
        model = tiny_model()
        hparams = {"batch_size": batch_size, "optimizer": "adamw", "warmup": np.float32(0.1),
                   "frozen": False, "max_examples": None}
        logger = HParamsLogger(log_dir, hparams, headline="test_accuracy")
        histories[name] = model.fit(
            *tiny_data(2), batch_size=batch_size, epochs=2, shuffle=False, verbose=0,
            validation_data=tiny_data(1),
            callbacks=[LearningRateLogger(), TensorBoard(str(log_dir)), logger],
        ).history
        logger.log_metrics({"test_accuracy": 0.5 + batch_size, "split": "test", "ok": True})

    sessions = hparams_sessions(tmp_path)
    assert sorted(sessions) == ["a/hparams", "b/hparams"]
    for name, batch_size in (("a", 2), ("b", 4)):
        session = sessions[f"{name}/hparams"]
        assert session["group"] == f"{name}/hparams"  # each run its own row, named after it
        # None is left out; numbers, strings and booleans are kept.
        assert session["hparams"] == pytest.approx(
            {"batch_size": batch_size, "optimizer": "adamw", "warmup": 0.1, "frozen": False}
        )
        expected = {f"training/{key}": values[-1] for key, values in histories[name].items()
                    if key != "learning_rate"}
        expected["score/test_accuracy"] = expected["score"] = 0.5 + batch_size
        assert session["metrics"] == pytest.approx(expected, rel=1e-6)
        # The dashboard's order: the headline first, the other scores, then the training logs.
        assert list(session["metrics"]) == [
            "score", "score/test_accuracy", "training/accuracy", "training/loss",
            "training/val_accuracy", "training/val_loss",
        ]


def test_runs_with_the_same_settings_are_still_two_rows_unless_given_one_trial_id(tmp_path):
    for name in ("a", "b", "c", "d"):
        logger = HParamsLogger(tmp_path / name, {"units": 1},
                               trial_id="repeats" if name in "cd" else "")
        logger.log_metrics({"accuracy": 0.25 if name in "ac" else 0.75})
    sessions = hparams_sessions(tmp_path)
    assert {name: session["group"] for name, session in sessions.items()} == {
        "a/hparams": "a/hparams", "b/hparams": "b/hparams",
        "c/hparams": "repeats", "d/hparams": "repeats",
    }


def test_the_headline_may_be_a_log_of_the_last_epoch(tmp_path):
    model = tiny_model()
    logger = HParamsLogger(tmp_path, {"units": 8}, headline="val_accuracy")
    history = model.fit(*tiny_data(2), batch_size=4, epochs=1, verbose=0, validation_data=tiny_data(1),
                        callbacks=[logger])
    metrics = hparams_sessions(tmp_path)["hparams"]["metrics"]
    assert list(metrics)[0] == "score"
    assert metrics["score"] == pytest.approx(history.history["val_accuracy"][-1])


def test_hparams_must_be_plain_values(tmp_path):
    with pytest.raises(TypeError, match="'layers' is a list"):
        HParamsLogger(tmp_path, {"layers": [1, 2]})
    with pytest.raises(TypeError, match="must be a dict"):
        HParamsLogger(tmp_path, [("a", 1)])
    with pytest.raises(TypeError, match="`trial_id` must be a string"):
        HParamsLogger(tmp_path, {"a": 1}, trial_id=3)


def test_written_once_across_fits(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", loss="mse")
    logger = HParamsLogger(tmp_path, {"units": 1})
    for _ in range(2):
        model.fit(np.zeros((4, 3)), np.zeros(4), epochs=1, verbose=0, callbacks=[logger])
    sessions = hparams_sessions(tmp_path)
    assert list(sessions) == ["hparams"] and sessions["hparams"]["hparams"] == {"units": 1}
