"""A tiny classifier and its data for the callback tests, plus callbacks that watch `fit`."""

import os

import keras
import numpy as np

import kbert  # noqa: F401  (sets the TensorFlow backend)
from kbert.io.atomic_files import TEMPORARY_PREFIX
from kbert.models.optimization import BertAdamW, WarmupLinearDecay

BATCH_SIZE = 4
BATCHES_PER_EPOCH = 8


def tiny_model(seed=0, total_steps=2 * BATCHES_PER_EPOCH):
    """Dense logits over 4 features, with kbert's AdamW and warm-up/decay schedule."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=BertAdamW(WarmupLinearDecay(1e-3, total_steps=total_steps)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
        jit_compile=False,  # XLA compiling costs more than these few steps save.
    )
    return model


def tiny_data(batches=BATCHES_PER_EPOCH):
    generator = np.random.default_rng(0)
    x = generator.normal(size=(batches * BATCH_SIZE, 4)).astype("float32")
    y = generator.integers(0, 2, size=batches * BATCH_SIZE)
    return x, y


def fit(model, callbacks, epochs=2, batches=BATCHES_PER_EPOCH, **kwargs):
    x, y = tiny_data(batches)
    return model.fit(
        x, y, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks,
        **kwargs,
    )


def state(model):
    """Copies of the model's weights and its optimizer's variables (step, moments)."""
    return (
        [np.array(w) for w in model.get_weights()],
        [np.array(keras.ops.convert_to_numpy(v)) for v in model.optimizer.variables],
    )


def assert_same_state(a, b):
    for x, y in zip(a[0] + a[1], b[0] + b[1], strict=True):
        np.testing.assert_array_equal(x, y)


def temporary_files(directory):
    return [name for name in os.listdir(directory) if name.startswith(TEMPORARY_PREFIX)]


class BatchRecorder(keras.callbacks.Callback):
    """Keeps each batch's logs and the training state after it, by (epoch, batch)."""

    def __init__(self):
        super().__init__()
        self.logs = {}
        self.states = {}
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.logs[self.epoch, batch] = dict(logs)
        self.states[self.epoch, batch] = state(self.model)


class Interrupt(keras.callbacks.Callback):
    """Raises at the end of one batch, as a kill would stop the run there."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise Interrupted(f"interrupted at epoch {self.epoch}, batch {batch}")


class Interrupted(RuntimeError):
    pass

