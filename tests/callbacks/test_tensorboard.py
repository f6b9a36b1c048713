import numpy as np
import pytest

from kbert.callbacks import LearningRateLogger, TensorBoard
from kbert.callbacks.tensorboard import epoch_tag, step_tag
from tests.callbacks.conftest import fit, tiny_data, tiny_model
from tests.callbacks.event_files import load, scalars

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

EPOCH_BATCHES = 24


@pytest.mark.parametrize("update_freq", [50, 10])
def test_every_epoch_writes_its_train_and_validation_summaries(tmp_path, update_freq):
    # Keras' own callback writes epoch summaries only when an epoch's last
    # step is a multiple of `update_freq`: 24 and 48 are not, for 50 or 10.
    model = tiny_model(total_steps=2 * EPOCH_BATCHES)
    history = fit(model, [LearningRateLogger(), TensorBoard(str(tmp_path), update_freq=update_freq)],
                  epochs=2, batches=EPOCH_BATCHES, validation_data=tiny_data(3))

    train = scalars(tmp_path / "train")
    for tag in ("loss", "accuracy", "learning_rate"):
        assert sorted(train[epoch_tag(tag)]) == [0, 1]
        np.testing.assert_allclose([train[epoch_tag(tag)][e] for e in (0, 1)], history.history[tag],
                                   rtol=1e-6)
    batch_steps = list(range(update_freq, 2 * EPOCH_BATCHES + 1, update_freq))
    assert sorted(train.get("steps/loss_running_mean", {})) == batch_steps
    assert sorted(train.get("steps/learning_rate", {})) == batch_steps

    validation = scalars(tmp_path / "validation")
    for tag in ("loss", "accuracy"):
        assert sorted(validation[epoch_tag(tag)]) == [0, 1]
        np.testing.assert_allclose([validation[epoch_tag(tag)][e] for e in (0, 1)],
                                   history.history[f"val_{tag}"], rtol=1e-6)
        # Each validation, at the optimizer step it followed.
        assert sorted(validation[step_tag(tag, running_mean=False)]) == [EPOCH_BATCHES, 2 * EPOCH_BATCHES]
    assert not any(tag.endswith("_running_mean") for tag in validation)
    # Every tag in one of two groups: the epoch curves, and those numbered by step.
    assert {tag.split("/")[0] for tag in list(train) + list(validation)} == {"epoch", "steps"}


def test_step_curves_say_they_are_running_means(tmp_path):
    model = tiny_model()
    history = fit(model, [LearningRateLogger(), TensorBoard(str(tmp_path), update_freq=1)], epochs=1,
                  batches=4)
    run = load(tmp_path / "train")
    assert "running mean" in run.SummaryMetadata("steps/loss_running_mean").summary_description
    assert "running mean" not in run.SummaryMetadata("steps/learning_rate").summary_description
    # The curve is Keras' mean over the epoch so far: at its last step, the epoch's loss.
    steps = scalars(tmp_path / "train")["steps/loss_running_mean"]
    np.testing.assert_allclose(steps[4], history.history["loss"][0], rtol=1e-6)
    assert steps[1] != steps[4]


def test_epoch_only_summaries(tmp_path):
    model = tiny_model()
    fit(model, [TensorBoard(str(tmp_path), update_freq="epoch")], epochs=3, batches=3)
    train = scalars(tmp_path / "train")
    assert sorted(train["epoch/loss"]) == [0, 1, 2]
    assert not any(tag.startswith("steps/") for tag in train)


def test_a_model_names_its_loss_for_summaries(tmp_path):
    # A pretrainer's loss (about 6) must not share the `epoch/loss` card of the
    # fine-tuning runs beside it (under 1): it names its own.
    model = tiny_model()
    model.summary_loss_name = "pretraining_loss"
    x, y = tiny_data(2)
    fit(model, [TensorBoard(str(tmp_path), update_freq=1)], epochs=1, batches=2, validation_data=(x, y))
    train, validation = scalars(tmp_path / "train"), scalars(tmp_path / "validation")
    assert {"epoch/pretraining_loss", "steps/pretraining_loss_running_mean"} <= set(train)
    assert {"epoch/pretraining_loss", "steps/pretraining_loss"} <= set(validation)
    assert not any(tag.split("/")[1].startswith("loss") for tag in list(train) + list(validation))
