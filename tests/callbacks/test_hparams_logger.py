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
        logger = HParamsLogger(log_dir, hparams)
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
        # None is left out; numbers, strings and booleans are kept.
        assert session["hparams"] == pytest.approx(
            {"batch_size": batch_size, "optimizer": "adamw", "warmup": 0.1, "frozen": False}
        )
        expected = {key: values[-1] for key, values in histories[name].items() if key != "learning_rate"}
        expected["test_accuracy"] = 0.5 + batch_size
        assert sorted(expected) == ["accuracy", "loss", "test_accuracy", "val_accuracy", "val_loss"]
        assert session["metrics"] == pytest.approx(expected, rel=1e-6)


def test_hparams_must_be_plain_values(tmp_path):
    with pytest.raises(TypeError, match="'layers' is a list"):
        HParamsLogger(tmp_path, {"layers": [1, 2]})
    with pytest.raises(TypeError, match="must be a dict"):
        HParamsLogger(tmp_path, [("a", 1)])


def test_written_once_across_fits(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", loss="mse")
    logger = HParamsLogger(tmp_path, {"units": 1})
    for _ in range(2):
        model.fit(np.zeros((4, 3)), np.zeros(4), epochs=1, verbose=0, callbacks=[logger])
    sessions = hparams_sessions(tmp_path)
    assert list(sessions) == ["hparams"] and sessions["hparams"]["hparams"] == {"units": 1}
