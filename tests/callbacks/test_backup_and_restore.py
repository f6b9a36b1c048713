import errno
import json
import os

import h5py
import keras
import pytest

from kbert.callbacks import BackupAndRestore, backup_and_restore
from tests.test_case import BACKEND, file_size_limit
from tests.callbacks.conftest import (
    BATCHES_PER_EPOCH,
    BatchRecorder,
    Interrupt,
    Interrupted,
    assert_same_state,
    fit,
    state,
    temporary_files,
    tiny_model,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


class StateAtTrainBegin(BatchRecorder):
    """Keeps the state that `fit` starts from, after the callbacks before it ran."""

    def on_train_begin(self, logs=None):
        self.initial_state = state(self.model)


def weight_files(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".weights.h5"))


def position(backup):
    found = backup.peek()
    return None if found is None else (found["epoch"], found["batches_done"], found["step"])


def test_no_backup_peeks_none(tmp_path):
    assert BackupAndRestore(tmp_path / "backup").peek() is None


def test_resumes_mid_epoch_with_weights_optimizer_and_position(tmp_path):
    backup_dir = tmp_path / "backup"
    recorder = BatchRecorder()
    with pytest.raises(Interrupted):
        # Backups after batches 3 and 6, at the end of epoch 0 (step 8), then
        # after 3 batches of epoch 1 (step 11); interrupted after 5.
        fit(tiny_model(seed=1), [BackupAndRestore(backup_dir, save_freq=3), recorder,
                                 Interrupt(epoch=1, batch=4)], epochs=3)
    backup = BackupAndRestore(backup_dir, save_freq=3)
    assert position(backup) == (1, 3, 11)
    assert backup.peek()["weights_file"] == weight_files(backup_dir)[0]
    assert len(weight_files(backup_dir)) == 1 and temporary_files(backup_dir) == []

    model = tiny_model(seed=2)  # Other initial weights.
    restored = StateAtTrainBegin()
    history = fit(model, [backup, restored], epochs=3)
    assert_same_state(restored.initial_state, recorder.states[1, 2])
    assert int(restored.initial_state[1][0]) == 11  # optimizer.iterations
    assert history.epoch == [1, 2]  # Plain Keras data: epoch 1 again from its start.
    assert not backup_dir.exists()  # Deleted after the run ended.


def test_positions_count_the_batches_the_caller_skipped(tmp_path):
    backup_dir = tmp_path / "backup"
    with pytest.raises(Interrupted):
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=3), Interrupt(1, 4)], epochs=3)
    backup = BackupAndRestore(backup_dir, save_freq=3)
    assert position(backup) == (1, 3, 11)

    # A pipeline that skips the 3 batches done runs the other 5 of epoch 1;
    # here every epoch has those 5, enough to follow the count.
    backup.set_batches_skipped(backup.peek()["batches_done"])

    class Positions(keras.callbacks.Callback):
        seen = set()

        def on_train_batch_end(self, batch, logs=None):
            self.seen.add(position(backup))

    with pytest.raises(Interrupted):
        fit(tiny_model(), [backup, Positions(), Interrupt(2, 3)], epochs=4, batches=5)
    # Backups: epoch 1 after 3 + 3 batches (step 14), its end (step 16), epoch 2
    # after 3 batches (step 19): the skip counts in the first epoch only.
    assert Positions.seen == {(1, 3, 11), (1, 6, 14), (2, 0, 16), (2, 3, 19)}


@pytest.mark.skipif(BACKEND == "torch", reason="Keras runs one step per execution on PyTorch")
def test_positions_with_several_steps_per_execution(tmp_path):
    # Keras reports batches 1, 3, 5, ...: the count reaches 3 at batch 3.
    model = tiny_model()
    model.compile(optimizer=model.optimizer, loss=model.loss, steps_per_execution=2, jit_compile=False)
    backup = BackupAndRestore(tmp_path / "backup", save_freq=3)
    with pytest.raises(Interrupted):
        fit(model, [backup, Interrupt(epoch=0, batch=5)])
    assert position(backup) == (0, 4, 4)


def test_crash_between_weights_and_metadata_keeps_the_previous_backup(tmp_path, monkeypatch):
    backup_dir = tmp_path / "backup"
    backup = BackupAndRestore(backup_dir, save_freq=3)
    write_metadata = backup._write_metadata
    calls = []

    def crash_on_second_call(position):
        calls.append(position)
        if len(calls) == 2:
            raise Interrupted("killed after the weights, before the metadata")
        write_metadata(position)

    monkeypatch.setattr(backup, "_write_metadata", crash_on_second_call)
    recorder = BatchRecorder()
    with pytest.raises(Interrupted):
        fit(tiny_model(), [backup, recorder], epochs=2)
    assert position(BackupAndRestore(backup_dir)) == (0, 3, 3)
    assert len(weight_files(backup_dir)) == 2  # The new weights, named by no metadata.

    restored = StateAtTrainBegin()
    fresh = BackupAndRestore(backup_dir, save_freq=3, delete_checkpoint=False)
    fit(tiny_model(seed=3), [fresh, restored], epochs=2)
    assert_same_state(restored.initial_state, recorder.states[0, 2])
    assert position(fresh) == (2, 0, 3 + 2 * BATCHES_PER_EPOCH)  # Epoch 0 from its start again.
    assert weight_files(backup_dir) == [fresh.peek()["weights_file"]]  # The orphan is gone.


def test_crash_while_writing_weights_leaves_no_partial_backup(tmp_path, monkeypatch):
    backup_dir = tmp_path / "backup"
    model = tiny_model()
    recorder = BatchRecorder()
    with pytest.raises(Interrupted):
        fit(model, [BackupAndRestore(backup_dir, save_freq=3), recorder, Interrupt(0, 4)])
    before = {name: (backup_dir / name).read_bytes() for name in os.listdir(backup_dir)}

    def write_half_then_crash(model, path):
        with open(path, "wb") as file:
            file.write(b"\x89HDF\r\n half of the weights")
        raise Interrupted("killed while writing the weights")

    monkeypatch.setattr(backup_and_restore, "write_weights_file", write_half_then_crash)
    # A restore to the backup (step 3), then three batches and the crash.
    with pytest.raises(Interrupted, match="writing"):
        fit(model, [BackupAndRestore(backup_dir, save_freq=3)])
    assert {name: (backup_dir / name).read_bytes() for name in os.listdir(backup_dir)} == before
    assert position(BackupAndRestore(backup_dir)) == (0, 3, 3)

    monkeypatch.undo()
    restored = StateAtTrainBegin()
    fit(tiny_model(seed=4), [BackupAndRestore(backup_dir), restored], epochs=1)
    assert_same_state(restored.initial_state, recorder.states[0, 2])


def test_a_full_disk_during_a_backup_is_an_error_that_leaves_the_last_backup(tmp_path):
    # HDF5 writing straight to a full disk ends the process in a segmentation fault when the
    # file is closed (h5py/h5py#914): the weights are built in memory, then written by Python.
    backup_dir = tmp_path / "backup"
    recorder = BatchRecorder()
    with pytest.raises(Interrupted):
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=3), recorder, Interrupt(0, 4)])
    before = {name: (backup_dir / name).read_bytes() for name in os.listdir(backup_dir)}
    size = max(len(data) for data in before.values())

    # The restore reads; the next backup, three batches on, finds the disk full.
    with file_size_limit(size // 2), pytest.raises(OSError) as caught:
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=3)])
    assert caught.value.errno == errno.EFBIG and caught.value.filename.startswith(str(backup_dir))
    assert not caught.value.filename.startswith(str(backup_dir / ".tmp-"))  # the backup's own name
    open_files = [os.fsdecode(identifier.name) for identifier in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)]
    assert not [name for name in open_files if name.startswith(str(backup_dir))]  # nothing for HDF5 to close at exit
    assert {name: (backup_dir / name).read_bytes() for name in os.listdir(backup_dir)} == before
    restored = StateAtTrainBegin()
    fit(tiny_model(seed=4), [BackupAndRestore(backup_dir), restored], epochs=1)
    assert_same_state(restored.initial_state, recorder.states[0, 2])


def test_metadata_names_complete_weights_at_every_backup(tmp_path):
    backup_dir = tmp_path / "backup"

    class CheckBackup(BatchRecorder):
        def on_train_batch_end(self, batch, logs=None):
            found = json.loads((backup_dir / "training_metadata.json").read_text())
            assert (backup_dir / found["weights_file"]).is_file()
            assert weight_files(backup_dir) == [found["weights_file"]]

    fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=1, delete_checkpoint=False),
                       CheckBackup()], epochs=1)


@pytest.mark.parametrize("outside", ["absolute", "parent"])
def test_metadata_naming_weights_outside_the_backup_is_refused_before_loading(tmp_path, monkeypatch, outside):
    backup_dir = tmp_path / "backup"
    with pytest.raises(Interrupted):
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=3), Interrupt(0, 4)])
    metadata = backup_dir / "training_metadata.json"
    found = json.loads(metadata.read_text())
    # Real weights there, which a restore following the name would load.
    weights = (backup_dir / found["weights_file"]).read_bytes()
    elsewhere = tmp_path / "elsewhere" / found["weights_file"]
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(weights)
    (tmp_path / "x.weights.h5").write_bytes(weights)
    found["weights_file"] = str(elsewhere) if outside == "absolute" else "../x.weights.h5"
    metadata.write_text(json.dumps(found))

    model = tiny_model(seed=2)
    monkeypatch.setattr(model, "load_weights", lambda *args, **kwargs: pytest.fail("weights were loaded"))
    with pytest.raises(ValueError, match="weights_file") as error:
        fit(model, [BackupAndRestore(backup_dir, save_freq=3)])
    assert "training_metadata.json" in str(error.value) and found["weights_file"] in str(error.value)


def test_a_finished_run_deletes_its_backup_unless_told_not_to(tmp_path):
    model = tiny_model()
    fit(model, [BackupAndRestore(tmp_path / "deleted", save_freq=3)], epochs=2)
    assert not (tmp_path / "deleted").exists()

    kept = BackupAndRestore(tmp_path / "kept", save_freq=3, delete_checkpoint=False)
    fit(model, [kept], epochs=2)
    assert position(kept) == (2, 0, 4 * BATCHES_PER_EPOCH)
    assert temporary_files(tmp_path / "kept") == []


def test_a_later_fit_of_the_restored_model_starts_at_its_own_first_epoch(tmp_path):
    # Keras sets `_initial_epoch` to restore and never clears it.
    backup_dir = tmp_path / "backup"
    with pytest.raises(Interrupted):
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq="epoch"), Interrupt(1, 0)])
    model = tiny_model()
    assert fit(model, [BackupAndRestore(backup_dir, save_freq="epoch")]).epoch == [1]
    assert fit(model, []).epoch == [0, 1]


@pytest.mark.parametrize("save_freq", [0, -1, 1.5, True, "batch"])
def test_rejects_a_bad_save_freq(tmp_path, save_freq):
    with pytest.raises(ValueError, match="save_freq"):
        BackupAndRestore(tmp_path, save_freq=save_freq)


def dropout_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.5),
                              keras.layers.Dense(2)])
    model.compile("sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    return model


def seed_states(model):
    return [keras.ops.convert_to_numpy(v).tolist() for v in model.variables
            if v.name == "seed_generator_state"]


@pytest.mark.skipif(
    BACKEND == "torch",
    reason="Keras' dropout draws from PyTorch's generator there, not from seed generators; backups keep "
           "that generator's state (tests/pretraining/test_pretrainer.py resumes exactly on PyTorch)",
)
def test_dropout_random_state_is_backed_up_and_restored_and_the_resume_is_said(tmp_path, capsys):
    backup_dir = tmp_path / "backup"
    recorder = BatchRecorder()

    class SeedRecorder(keras.callbacks.Callback):
        states = {}

        def on_train_batch_end(self, batch, logs=None):
            self.states[recorder.epoch, batch] = seed_states(self.model)

    with pytest.raises(Interrupted):
        fit(dropout_model(), [BackupAndRestore(backup_dir, save_freq=3), recorder, SeedRecorder(),
                              Interrupt(epoch=1, batch=4)])
    assert position(BackupAndRestore(backup_dir)) == (1, 3, 11)
    assert capsys.readouterr().out == ""  # nothing to resume from yet

    model = dropout_model(seed=5)  # other weights, other initial seeds
    restored = StateAtTrainBegin()

    class SeedsAtTrainBegin(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.states = seed_states(self.model)

    seeds = SeedsAtTrainBegin()
    fit(model, [BackupAndRestore(backup_dir, save_freq=3), restored, seeds])
    # Weights and the dropout layer's seed generator as they were after step 11.
    assert_same_state(restored.initial_state, recorder.states[1, 2])
    assert seeds.states == SeedRecorder.states[1, 2] and seeds.states[0][1] == 11
    out = capsys.readouterr().out
    assert out.count("Resuming from the backup") == 1
    assert f"in {backup_dir} at step 11 (epoch 2, 3 batch(es) into it)." in out


def test_a_backup_without_random_state_says_that_dropout_will_differ(tmp_path, capsys):
    backup_dir = tmp_path / "backup"
    with pytest.raises(Interrupted):
        fit(dropout_model(), [BackupAndRestore(backup_dir, save_freq=3), Interrupt(epoch=0, batch=4)])
    metadata = json.loads((backup_dir / "training_metadata.json").read_text())
    del metadata["seed_generators"]  # as a backup written before they were kept
    (backup_dir / "training_metadata.json").write_text(json.dumps(metadata))
    fit(dropout_model(), [BackupAndRestore(backup_dir, save_freq=3)])
    assert "other dropout masks than an uninterrupted one" in capsys.readouterr().out
    # Quiet: nothing said.
    with pytest.raises(Interrupted):
        fit(dropout_model(), [BackupAndRestore(backup_dir, save_freq=3), Interrupt(epoch=0, batch=4)])
    capsys.readouterr()
    fit(dropout_model(), [BackupAndRestore(backup_dir, save_freq=3, verbose=False)])
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("record", ['{"epoch": 1, "batches_d', '{"epoch": 1}', '[1, 2]',
                                    '{"epoch": 1, "batches_done": 3, "step": -1, "first_step": 0}'])
def test_a_broken_backup_record_is_refused_in_one_line_naming_it(tmp_path, record):
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir()
    (backup_dir / "training_metadata.json").write_text(record)
    with pytest.raises(ValueError) as error:
        BackupAndRestore(backup_dir).peek()
    message = str(error.value)
    assert "\n" not in message and str(backup_dir / "training_metadata.json") in message
    assert f"Remove {backup_dir} to start the run again" in message
    if record.startswith('{"epoch": 1}'):
        assert "the key 'batches_done' is missing" in message
    if "-1" in record:
        assert "the key 'step' is -1, not a count" in message


def test_a_backup_of_another_model_is_refused_in_one_line(tmp_path, recwarn):
    backup_dir = tmp_path / "backup"
    with pytest.raises(Interrupted):
        fit(tiny_model(), [BackupAndRestore(backup_dir, save_freq=3), Interrupt(0, 4)])
    keras.utils.set_random_seed(0)
    wider = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    wider.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    recwarn.clear()
    with pytest.raises(ValueError) as error:
        fit(wider, [BackupAndRestore(backup_dir, save_freq=3)])
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"The backup {backup_dir / 'backup-step3-'}")
    assert "does not fit this model" in message and f"Remove {backup_dir}" in message
    assert not [w for w in recwarn if "Skipping" in str(w.message)]  # Keras' warnings per weight, held back
