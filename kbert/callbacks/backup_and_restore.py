"""Keras' BackupAndRestore with atomic backups and the position inside an epoch."""

import json
import os
import re

import keras

from kbert.backend import random_state, restore_random_state
from kbert.backend.distribute import all_workers, is_chief, model_strategy, remove_worker_directory, worker_directory
from kbert.io.atomic_files import remove_temporary_files, write_atomically, write_weights_file
from kbert.models.optimization import batches_trained

# `backup-step<optimizer step>-epoch<epoch>-batch<batches done>.weights.h5`: the
# position makes the name of every backup of a run new, so writing one never
# replaces the file that the current metadata names.
_WEIGHTS_NAME = re.compile(r"backup-step\d+-epoch\d+-batch\d+\.weights\.h5")


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Backs up the training state during `fit` and restores it in the next one.

    As `keras.callbacks.BackupAndRestore`: when a `fit` is interrupted (killed,
    preempted, crashed), a new `fit` with this callback on the same
    `backup_dir` loads the weights and optimizer state of the last backup and
    starts at its epoch; after a `fit` that ends normally the backup is
    deleted (unless `delete_checkpoint=False`). Two things differ, for long
    runs:

    - Backups are atomic. The weights (with the optimizer's variables and
      step) go to a new file under a temporary name that is renamed when
      complete, then a small JSON metadata file naming it is replaced the same
      way, then older weight files are deleted. A kill at any moment leaves
      either the previous complete backup or the new one, never a mix.
    - The metadata records where in an epoch the backup was taken, and `peek`
      reads it without loading anything: `epoch` is the epoch in progress,
      `batches_done` the batches finished in it, `step` the optimizer's
      `iterations`. A backup at the end of an epoch records the next epoch
      and 0 batches done; `first_step` is the optimizer step the run began
      at, so `step - first_step` is the number of batches trained. A data pipeline that can skip batches (the
      pretrainer's) calls `peek` before `fit`, skips `batches_done` batches
      of that epoch's data, and calls `set_batches_skipped` so the positions
      of later backups count them. Plain Keras `fit` runs that epoch again
      from its first batch.

    Backups are taken every `save_freq` batches and at the end of every
    epoch. Batches are counted as Keras numbers them; with the default
    `steps_per_execution=1` Keras reports every batch, so backups fall
    exactly every `save_freq` batches and `batches_done` is exact. With
    `steps_per_execution=n` Keras reports only every `n`-th batch: a backup
    comes at the first report after `save_freq` batches, `batches_done` is
    still the batches finished, except that it may overshoot in a short
    last execution of an epoch (whose end backup then corrects it).

    - The random state of the model's layers is backed up too. Keras keeps
      it (dropout's, for one) in `keras.random.SeedGenerator` variables that
      `save_weights` leaves out; without them a resumed run would draw other
      dropout masks than an uninterrupted one. They are stored in the
      metadata file, so they always match its weights.

    - Under several workers (`tf.distribute.MultiWorkerMirroredStrategy`),
      every worker backs up, as TensorFlow's multi-worker checkpointing
      expects, but only the chief into `backup_dir`; the others write to
      temporary directories of their own, removed when `fit` ends. Every
      worker restores from `backup_dir`, which must be on storage they all
      read (a shared file system, or one machine); a `fit` whose workers
      find different backups there fails at its start.

    A `fit` that restores a backup says so once (unless `verbose=False`):
    the step it resumes from, the epoch and the batches done in it.

    Keras wants the model built before `fit` (call it on a batch, or give
    it an `Input`). `backup_dir` must be a local directory used by nothing
    else. The restore puts back what `save_weights` writes and the layers'
    seed generators; other state kept outside the model's variables (a
    learning rate schedule's Python attributes, the data pipeline's
    position, random ops called without a layer's seed generator) is the
    caller's to restore.

    Args:
        backup_dir: the directory of the backup.
        save_freq: back up every this many batches (and at each epoch end);
            `"epoch"` for epoch ends only.
        delete_checkpoint: delete the backup when `fit` ends normally.
        verbose: print a line when a `fit` resumes from a backup.

    Example:
    >>> import numpy as np, tempfile
    >>> backup = BackupAndRestore(tempfile.mkdtemp(), save_freq=2, delete_checkpoint=False)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> history = model.fit(np.zeros((8, 3)), np.zeros(8), batch_size=2, epochs=1,
    ...                     verbose=0, callbacks=[backup])
    >>> {key: backup.peek()[key] for key in ("epoch", "batches_done", "step")}
    {'epoch': 1, 'batches_done': 0, 'step': 4}
    """

    def __init__(self, backup_dir, save_freq=500, delete_checkpoint=True, verbose=True):
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int)
                                     or save_freq < 1):
            raise ValueError(f"`save_freq` must be a positive integer or 'epoch', got {save_freq!r}.")
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=delete_checkpoint)
        self.backup_dir = os.fspath(backup_dir)
        self._epoch = 0
        self._epoch_begun = False
        self._batches_skipped = 0
        self._batch_offset = 0
        self._first_step = 0
        self._random_state = None
        self.verbose = bool(verbose)

    def peek(self):
        """The position of the backup, or `None` when there is none.

        Returns:
            A dict with `epoch` (the epoch to run next), `batches_done`
            (batches of it already done), `step` (the optimizer's iterations),
            `first_step` (its value when the run began), `weights_file` (the
            weights' file name in `backup_dir`) and `seed_generators` (the
            state of each of the model's seed generators).
        """
        path = self._training_metadata_path
        try:
            with open(path, encoding="utf-8") as file:
                position = json.load(file)
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not the JSON of a backup ({error}); it was cut short or edited, so the run "
                             f"cannot resume from it. Remove {self.backup_dir} to start the run again from its "
                             "first step.") from None
        _check_position(position, path, self.backup_dir)
        return position

    def set_batches_skipped(self, batches):
        """Says that the next `fit` skips the first `batches` batches of its first epoch.

        Call it after skipping the `batches_done` batches that `peek` reports,
        so the backups of that epoch record their position in the whole epoch.
        It applies to one `fit`.
        """
        if int(batches) != batches or batches < 0:
            raise ValueError(f"`batches` must be a non-negative integer, got {batches!r}.")
        self._batches_skipped = int(batches)

    def on_train_begin(self, logs=None):
        self._epoch_begun = False
        self._random_state = None
        self._write_dir = worker_directory(self.backup_dir, model_strategy(self.model))
        position = self.peek()
        if position is not None:
            self._check_weights_file(position.get("weights_file"))
        found = all_workers(-1 if position is None else position["step"], model_strategy(self.model))
        if len(set(found)) > 1:
            steps = ", ".join("none" if step < 0 else f"step {step}" for step in found)
            raise ValueError(f"The workers find different backups in {self.backup_dir} ({steps}, "
                             "by replica): it must be one directory that every worker reads.")
        if position is None:
            self._first_step = batches_trained(self.model.optimizer)
            return
        self._first_step = position["first_step"]
        if not self.model.built:
            raise ValueError(
                f"Build the model before `fit` to restore it from {self.backup_dir} "
                "(call it on a batch of data, or start it with a `keras.Input`)."
            )
        weights = os.path.join(self.backup_dir, position["weights_file"])
        if not os.path.exists(weights):
            raise FileNotFoundError(f"The backup's metadata names {weights}, which is missing.")
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            # The optimizer's variables must exist for `load_weights` to fill them.
            optimizer.build(self.model.trainable_variables)
        self._load_weights(weights)
        restored_seeds = self._restore_seed_generators(position.get("seed_generators"))
        # At the first batch: starting an epoch's data may draw from the
        # backend's generator (a PyTorch DataLoader does), as it did before
        # the backup in the run that made it.
        self._random_state = position.get("random_state")
        self.model._initial_epoch = position["epoch"]
        if self.verbose:
            print(f"Resuming from the backup in {self.backup_dir} at step {position['step']} "
                  f"(epoch {position['epoch'] + 1}, {position['batches_done']} batch(es) into it)"
                  + ("" if restored_seeds else "; its random state (dropout) was not saved, so "
                     "the rest of the run draws other dropout masks than an uninterrupted one")
                  + ".", flush=True)

    def _load_weights(self, path):
        """Loads the backup's weights; a backup of another model is refused in one line, its warnings held back."""
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self.model.load_weights(path)
            except (ValueError, KeyError) as error:
                lines = str(error).strip().splitlines() or [type(error).__name__]
                first = lines[0].split(". ")[0].rstrip(".:")  # Keras' first sentence; the rest is per weight
                raise ValueError(f"The backup {path} does not fit this model ({first}): another model made it (another "
                                 f"encoder size, objective or optimizer). Remove {self.backup_dir} to start the run "
                                 "again from its first step, or resume it with the model that made it.") from None
        for warning in caught:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    def _check_weights_file(self, name):
        """Refuses a `weights_file` that is not a bare backup file name: it must not reach outside `backup_dir`."""
        if not isinstance(name, str) or not _WEIGHTS_NAME.fullmatch(name):
            raise ValueError(f"The backup's metadata {self._training_metadata_path} names `weights_file` {name!r}, "
                             f"which is not a backup file name in {self.backup_dir}.")

    def on_train_batch_begin(self, batch, logs=None):
        if self._random_state is not None:
            restore_random_state(self._random_state)
            self._random_state = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        # Only the first epoch of a `fit` can start after skipped batches.
        self._batch_offset = 0 if self._epoch_begun else self._batches_skipped
        self._epoch_begun = True
        self._batches_skipped = 0

    def on_train_batch_end(self, batch, logs=None):
        if self._should_save_on_batch(batch):
            self._back_up(epoch=self._epoch, batches_done=self._batch_offset + batch + 1)

    def on_epoch_end(self, epoch, logs=None):
        # Keras' batch counter: the next batch opens a new epoch, and the count
        # towards `save_freq` restarts with this backup.
        self._last_batch_seen = 0
        self._batches_seen_since_last_saving = 0
        self._back_up(epoch=epoch + 1, batches_done=0)

    def on_train_end(self, logs=None):
        if is_chief(model_strategy(self.model)):
            super().on_train_end(logs)
        remove_worker_directory(self._write_dir, self.backup_dir)
        # Keras reads `_initial_epoch` in every later `fit` but never clears it:
        # a second `fit` of the same model would skip the epochs restored here.
        self.model._initial_epoch = None

    def _back_up(self, epoch, batches_done):
        step = batches_trained(self.model.optimizer)
        weights_file = f"backup-step{step}-epoch{epoch}-batch{batches_done}.weights.h5"
        self._write_weights(os.path.join(self._write_dir, weights_file))
        self._write_metadata(
            {
                "epoch": epoch,
                "batches_done": batches_done,
                "step": step,
                "first_step": self._first_step,
                "weights_file": weights_file,
                # In the model's order; the paths are for people reading it.
                "seed_generators": [
                    [variable.path, [int(v) for v in keras.ops.convert_to_numpy(variable)]]
                    for variable in _seed_generator_states(self.model)
                ],
                # The backend's own generators, where its dropout draws from them (PyTorch).
                "random_state": random_state(),
            }
        )
        self._remove_stale_files(keep=weights_file)

    def _restore_seed_generators(self, saved):
        """Puts back the seed generators' states; `False` if the backup has none for them."""
        states = _seed_generator_states(self.model)
        if not states:
            return True
        # Matched by order, as `load_weights` matches weights: the paths hold
        # automatic layer names, which differ in a process that built other
        # models first.
        if saved is None or len(saved) != len(states):
            return False
        for variable, (_, value) in zip(states, saved):
            variable.assign(value)
        return True

    def _write_weights(self, path):
        # Built in memory, then written: a full disk is an OSError that leaves the last backup, not an HDF5 crash.
        write_atomically(path, lambda temporary: write_weights_file(self.model, temporary))

    def _write_metadata(self, position):
        def write(temporary):
            with open(temporary, "w") as file:
                json.dump(position, file)

        write_atomically(os.path.join(self._write_dir, os.path.basename(self._training_metadata_path)), write)

    def _remove_stale_files(self, keep):
        remove_temporary_files(self._write_dir)
        for name in os.listdir(self._write_dir):
            if name != keep and _WEIGHTS_NAME.fullmatch(name):
                os.remove(os.path.join(self._write_dir, name))


def _check_position(position, path, backup_dir):
    """Refuses, naming the key, a backup metadata file that lacks a position `fit` needs."""
    if not isinstance(position, dict):
        raise ValueError(f"{path}: not the record of a backup (a JSON object); it was edited, so the run cannot "
                         f"resume from it. Remove {backup_dir} to start the run again from its first step.")
    for key in ("epoch", "batches_done", "step", "first_step"):
        value = position.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            said = "is missing" if key not in position else f"is {value!r}, not a count"
            raise ValueError(f"{path}: the key {key!r} {said}; it was edited, so the run cannot resume from it. "
                             f"Remove {backup_dir} to start the run again from its first step.")


def _seed_generator_states(model):
    """The state variables of the `keras.random.SeedGenerator`s of the model's layers, in order."""
    return [v for v in model.variables if v.name == "seed_generator_state"]
