import numpy as np
import pytest

from kbert.callbacks import LearningRateLogger, TensorBoard
from tests.callbacks.conftest import fit, tiny_data, tiny_model
from tests.callbacks.event_files import scalars

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
        assert sorted(train[f"epoch_{tag}"]) == [0, 1]
        np.testing.assert_allclose([train[f"epoch_{tag}"][e] for e in (0, 1)], history.history[tag],
                                   rtol=1e-6)
    batch_steps = list(range(update_freq, 2 * EPOCH_BATCHES + 1, update_freq))
    assert sorted(train.get("batch_loss", {})) == batch_steps

    validation = scalars(tmp_path / "validation")
    for tag in ("loss", "accuracy"):
        assert sorted(validation[f"epoch_{tag}"]) == [0, 1]
        np.testing.assert_allclose([validation[f"epoch_{tag}"][e] for e in (0, 1)],
                                   history.history[f"val_{tag}"], rtol=1e-6)
        # Each validation, at the optimizer step it followed.
        assert sorted(validation[f"evaluation_{tag}_vs_iterations"]) == [EPOCH_BATCHES, 2 * EPOCH_BATCHES]
    assert not any(tag.startswith("batch_") for tag in validation)


def test_epoch_only_summaries(tmp_path):
    model = tiny_model()
    fit(model, [TensorBoard(str(tmp_path), update_freq="epoch")], epochs=3, batches=3)
    train = scalars(tmp_path / "train")
    assert sorted(train["epoch_loss"]) == [0, 1, 2]
    assert not any(tag.startswith("batch_") for tag in train)
