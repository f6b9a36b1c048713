import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert.callbacks
from kbert.callbacks import BackupAndRestore, LearningRateLogger, ModelCheckpoint, TensorBoard
from kbert.callbacks.tensorboard import step_tag
from kbert.models.optimization import WarmupLinearDecay
from tests.callbacks.conftest import BATCHES_PER_EPOCH, fit, tiny_data, tiny_model

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def scalars(directory):
    """{tag: {step: value}} of the scalar summaries in a TensorBoard event directory."""
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    number = float(tf.make_ndarray(value.tensor))
                    found.setdefault(value.tag, {})[event.step] = number
    return found


def test_standard_orders_the_callbacks_so_each_sees_what_it_needs(tmp_path):
    callbacks = kbert.callbacks.standard(tmp_path)
    assert [type(c) for c in callbacks] == [
        BackupAndRestore, LearningRateLogger, TensorBoard, ModelCheckpoint
    ]
    assert callbacks[0].backup_dir == str(tmp_path / "backup")
    assert callbacks[2].log_dir == str(tmp_path / "tensorboard")
    assert [type(c) for c in kbert.callbacks.standard(tmp_path, checkpoint=None)][-1] is TensorBoard


def test_tensorboard_gets_losses_metrics_and_learning_rate(tmp_path):
    model = tiny_model()
    x, y = tiny_data(2)
    history = fit(model, kbert.callbacks.standard(tmp_path, update_freq=2), epochs=2,
                  validation_data=(x, y))

    train = scalars(tmp_path / "tensorboard" / "train")
    for tag in ["loss", "accuracy", "learning_rate"]:
        assert set(train[f"epoch/{tag}"]) == {0, 1}
        assert set(train[step_tag(tag)]) == set(range(2, 2 * BATCHES_PER_EPOCH + 1, 2))
    schedule = WarmupLinearDecay(1e-3, total_steps=2 * BATCHES_PER_EPOCH)
    for step, rate in train["steps/learning_rate"].items():
        np.testing.assert_allclose(rate, float(schedule(step)), rtol=1e-6)
    np.testing.assert_allclose(train["epoch/loss"][1], history.history["loss"][1], rtol=1e-6)

    validation = scalars(tmp_path / "tensorboard" / "validation")
    assert {"epoch/loss", "epoch/accuracy"} <= set(validation)
    assert history.history["learning_rate"][1] == 0.0  # History sees the logger too.
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["epoch-001.keras", "epoch-002.keras"]
    keras.saving.load_model(tmp_path / "checkpoints" / names[-1])
    assert not (tmp_path / "backup").exists()


def test_batch_summaries_continue_across_fit_calls(tmp_path):
    # Keras' own TensorBoard starts each `fit` at batch 1 again.
    model = tiny_model()
    for _ in range(2):
        fit(model, [LearningRateLogger(), TensorBoard(str(tmp_path), update_freq=1)], epochs=1)
    steps = scalars(tmp_path / "train")["steps/loss_running_mean"]
    assert sorted(steps) == list(range(1, 2 * BATCHES_PER_EPOCH + 1))
