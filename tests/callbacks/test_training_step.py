import keras
import numpy as np
import pytest

from kbert.callbacks import LearningRateLogger, TrainingStepCallback
from kbert.models.optimization import BertAdamW, WarmupLinearDecay
from tests.callbacks.conftest import BATCHES_PER_EPOCH, fit, tiny_model

# kbert's backend code on every backend; on JAX a read of the model between steps costs the most.
pytestmark = pytest.mark.all_backends


class RecordsSteps(TrainingStepCallback):
    """What the callback knows after each batch, beside what the optimizer holds (read after it)."""

    def __init__(self):
        super().__init__()
        self.known, self.held = [], []

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        self.known.append((self.batches_trained, self.iterations, self.learning_rate()))


class ReadsTheOptimizer(keras.callbacks.Callback):
    def __init__(self, recorder):
        super().__init__()
        self.recorder = recorder

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        counter = optimizer._iterations if optimizer.gradient_accumulation_steps else optimizer.iterations
        self.recorder.held.append((int(keras.ops.convert_to_numpy(counter)),
                                   int(keras.ops.convert_to_numpy(optimizer.iterations)),
                                   float(keras.ops.convert_to_numpy(optimizer.learning_rate))))


@pytest.mark.parametrize("optimizer", ["schedule", "accumulating", "constant", "keras schedule"])
def test_the_step_and_rate_counted_on_the_host_are_the_optimizers(optimizer):
    model = tiny_model()
    rate = {"constant": 0.01, "keras schedule": keras.optimizers.schedules.ExponentialDecay(0.01, 3, 0.5)}
    if optimizer in rate:
        model.compile(optimizer=keras.optimizers.AdamW(rate[optimizer]), loss=model.loss, jit_compile=False)
    elif optimizer == "accumulating":
        model.compile(optimizer=BertAdamW(WarmupLinearDecay(1e-3, total_steps=8), gradient_accumulation_steps=3),
                      loss=model.loss, jit_compile=False)
    recorder = RecordsSteps()
    # Two `fit` calls: the second starts where the first ended.
    for _ in range(2):
        fit(model, [recorder, ReadsTheOptimizer(recorder)], epochs=2)
    assert len(recorder.known) == 4 * BATCHES_PER_EPOCH
    assert [known[:2] for known in recorder.known] == [held[:2] for held in recorder.held]
    np.testing.assert_allclose([k[2] for k in recorder.known], [h[2] for h in recorder.held], rtol=1e-6)
    assert recorder.known[-1][0] == 4 * BATCHES_PER_EPOCH


def test_batch_hooks_read_the_model_once_an_epoch(monkeypatch):
    reads = []
    model_property = keras.callbacks.Callback.model

    def counted(callback):
        reads.append(type(callback).__name__)
        return model_property.fget(callback)

    class StartCounting(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            monkeypatch.setattr(keras.callbacks.Callback, "model", property(counted, model_property.fset))

    class StopCounting(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            monkeypatch.undo()

    # Keras calls the batch-end hooks in the list's order: the reads between the two are counted.
    fit(tiny_model(), [StartCounting(), LearningRateLogger(), RecordsSteps(), StopCounting()], epochs=3)
    assert sorted(reads) == ["LearningRateLogger"] * 3 + ["RecordsSteps"] * 3
