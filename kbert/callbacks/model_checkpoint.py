"""Keras' ModelCheckpoint, writing atomically and keeping the newest few files."""

import os
import re
import string

import keras

from kbert.backend.distribute import is_chief, model_strategy, write_on_chief
from kbert.io.atomic_files import TEMPORARY_PREFIX, remove_temporary_files, write_weights_file


class ModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Saves the model during `fit`, never leaving a half-written file.

    Works as `keras.callbacks.ModelCheckpoint` (same arguments, `filepath`
    formatted with `epoch`, `batch` and the logs), with two changes for long
    runs:

    - each file is written under a temporary name in the same directory and
      renamed when complete, so a crash while saving leaves the earlier
      checkpoints intact and no broken file under a checkpoint name;
    - only the newest `keep` files whose names fit `filepath` remain (by
      modification time); earlier ones, also those of an earlier run into the
      same directory, are deleted after each save.

    `filepath` must be on a local file system (the rename is what makes the
    write atomic), with its formatting fields in the file name, not in the
    directory. Under several workers the chief writes `filepath`; the others
    save to temporary copies, removed at once, as TensorFlow's multi-worker
    checkpointing expects (saving may take every worker).

    Args:
        filepath: where to save, e.g. `"checkpoints/epoch-{epoch:03d}.keras"`.
        keep: how many checkpoint files to keep; `None` keeps them all.
        **kwargs: the other arguments of `keras.callbacks.ModelCheckpoint`
            (`monitor`, `save_best_only`, `save_weights_only`, `save_freq`...).

    Example:
    >>> import numpy as np, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> checkpoint = ModelCheckpoint(os.path.join(directory, "epoch-{epoch:03d}.keras"), keep=2)
    >>> history = model.fit(np.zeros((4, 3)), np.zeros(4), epochs=3, verbose=0,
    ...                     callbacks=[checkpoint])
    >>> sorted(os.listdir(directory))
    ['epoch-002.keras', 'epoch-003.keras']
    """

    def __init__(self, filepath, keep=None, **kwargs):
        super().__init__(filepath, **kwargs)
        if keep is not None and (int(keep) != keep or keep < 1):
            raise ValueError(f"`keep` must be a positive integer or None, got {keep!r}.")
        self.keep = keep
        self._checkpoint_name = _name_pattern(os.path.basename(self.filepath))

    def _save_model(self, epoch, batch, logs):
        filepath = self._get_file_path(epoch, batch, logs)
        if not self._should_save_model(epoch, batch, logs, filepath):
            return
        strategy = model_strategy(self.model)
        if self.save_weights_only:
            # Built in memory, then written: a full disk is an OSError, not an HDF5 crash.
            write_on_chief(filepath, lambda path: write_weights_file(self.model, path), strategy)
        else:
            write_on_chief(filepath, lambda path: self.model.save(path, overwrite=True), strategy)
        if is_chief(strategy):
            self._remove_old_checkpoints()

    def _remove_old_checkpoints(self):
        directory = os.path.dirname(os.path.abspath(self.filepath))
        remove_temporary_files(directory)
        if self.keep is None:
            return
        checkpoints = [
            os.path.join(directory, name)
            for name in os.listdir(directory)
            if self._checkpoint_name.fullmatch(name) and not name.startswith(TEMPORARY_PREFIX)
        ]
        # Newest first; the name breaks ties of equal modification times.
        checkpoints.sort(key=lambda path: (os.path.getmtime(path), path), reverse=True)
        for path in checkpoints[self.keep :]:
            os.remove(path)


def _name_pattern(template):
    """A regex matching the file names that `template.format(...)` can give."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(".+?")
    return re.compile("".join(parts))
