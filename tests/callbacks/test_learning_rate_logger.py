import keras
import numpy as np
import pytest

from kbert.callbacks import LearningRateLogger
from kbert.models.optimization import WarmupLinearDecay
from tests.callbacks.conftest import BATCHES_PER_EPOCH, BatchRecorder, fit, tiny_model

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def test_logged_rate_follows_the_schedule_at_the_optimizer_step():
    total_steps = 2 * BATCHES_PER_EPOCH
    model = tiny_model(total_steps=total_steps)
    schedule = WarmupLinearDecay(1e-3, total_steps=total_steps)  # An independent copy.
    recorder = BatchRecorder()
    history = fit(model, [LearningRateLogger(), recorder], epochs=2)

    logged, expected = [], []
    for (epoch, batch), logs in sorted(recorder.logs.items()):
        logged.append(logs["learning_rate"])
        # After batch `batch` of epoch `epoch` the optimizer has made this many steps.
        expected.append(float(schedule(epoch * BATCHES_PER_EPOCH + batch + 1)))
    assert len(logged) == total_steps
    np.testing.assert_allclose(logged, expected, rtol=1e-6)
    assert max(logged) == pytest.approx(1e-3) and logged[-1] == 0.0  # Warmed up, decayed.
    assert len(set(logged)) > total_steps // 2
    np.testing.assert_allclose(
        history.history["learning_rate"],
        [float(schedule(BATCHES_PER_EPOCH)), float(schedule(total_steps))],
        rtol=1e-6,
    )


def test_logs_a_constant_rate():
    model = tiny_model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=model.loss)
    recorder = BatchRecorder()
    history = fit(model, [LearningRateLogger(), recorder], epochs=1)
    rates = [logs["learning_rate"] for logs in recorder.logs.values()]
    assert rates == pytest.approx([0.05] * BATCHES_PER_EPOCH)
    assert history.history["learning_rate"] == pytest.approx([0.05])


def test_callbacks_before_the_logger_do_not_see_the_rate():
    # The rate is written into the one logs dict Keras passes along the list.
    before, after = BatchRecorder(), BatchRecorder()
    fit(tiny_model(), [before, LearningRateLogger(), after], epochs=1)
    assert all("learning_rate" not in logs for logs in before.logs.values())
    assert all("learning_rate" in logs for logs in after.logs.values())
