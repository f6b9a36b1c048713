import os

import keras
import numpy as np
import pytest

import kbert.callbacks
from kbert.callbacks import ModelCheckpoint
from tests.callbacks.conftest import fit, temporary_files, tiny_data, tiny_model

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def checkpoint_files(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".keras"))


def test_keeps_the_newest_loadable_checkpoints(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    model = tiny_model()
    fit(model, [ModelCheckpoint(str(tmp_path / "epoch-{epoch:03d}.keras"), keep=3)], epochs=5)

    assert checkpoint_files(tmp_path) == ["epoch-003.keras", "epoch-004.keras", "epoch-005.keras"]
    assert (tmp_path / "notes.txt").exists()
    assert temporary_files(tmp_path) == []
    x, _ = tiny_data()
    for name in checkpoint_files(tmp_path):
        restored = keras.saving.load_model(tmp_path / name)
        assert restored.optimizer.__class__ is model.optimizer.__class__
    np.testing.assert_allclose(restored.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)


def test_a_later_run_prunes_the_checkpoints_of_an_earlier_one(tmp_path):
    for epoch in (1, 2):  # An earlier run's files, older than any new one.
        (tmp_path / f"epoch-00{epoch}.keras").write_bytes(b"earlier run")
        os.utime(tmp_path / f"epoch-00{epoch}.keras", (1e9 + epoch, 1e9 + epoch))
    pattern = str(tmp_path / "epoch-{epoch:03d}.keras")
    fit(tiny_model(), [ModelCheckpoint(pattern, keep=3)], epochs=4, initial_epoch=2)
    assert checkpoint_files(tmp_path) == ["epoch-002.keras", "epoch-003.keras", "epoch-004.keras"]


def test_a_failed_save_leaves_the_earlier_checkpoints_and_no_partial_file(tmp_path, monkeypatch):
    model = tiny_model()
    pattern = str(tmp_path / "epoch-{epoch:03d}.keras")
    fit(model, [ModelCheckpoint(pattern, keep=2)], epochs=2)
    before = {name: (tmp_path / name).read_bytes() for name in checkpoint_files(tmp_path)}

    def save_half_then_fail(path, **kwargs):
        with open(path, "wb") as file:
            file.write(b"PK\x03\x04 half of a zip")
        raise OSError("disk full")

    monkeypatch.setattr(model, "save", save_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        fit(model, [ModelCheckpoint(pattern, keep=2)], epochs=3, initial_epoch=2)

    assert checkpoint_files(tmp_path) == ["epoch-001.keras", "epoch-002.keras"]
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert temporary_files(tmp_path) == []
    keras.saving.load_model(tmp_path / "epoch-002.keras")


def test_a_leftover_temporary_file_is_removed_by_the_next_save(tmp_path):
    leftover = tmp_path / ".tmp-0123abcd-epoch-001.keras"
    leftover.write_bytes(b"killed while saving")
    fit(tiny_model(), [ModelCheckpoint(str(tmp_path / "epoch-{epoch:03d}.keras"), keep=3)], epochs=1)
    assert not leftover.exists()
    assert checkpoint_files(tmp_path) == ["epoch-001.keras"]


def test_standard_checkpoints_every_n_batches(tmp_path):
    callbacks = kbert.callbacks.standard(tmp_path, checkpoint=4, keep=3, update_freq="epoch")
    fit(tiny_model(), callbacks, epochs=2)
    assert checkpoint_files(tmp_path / "checkpoints") == [
        "epoch-001-batch-000008.keras",
        "epoch-002-batch-000004.keras",
        "epoch-002-batch-000008.keras",
    ]


def test_rejects_a_bad_keep(tmp_path):
    with pytest.raises(ValueError, match="keep"):
        ModelCheckpoint(str(tmp_path / "m.keras"), keep=0)
