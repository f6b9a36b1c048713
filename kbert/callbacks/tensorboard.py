"""Keras' TensorBoard callback: every epoch's summaries written, batch summaries numbered by step."""

import keras

from kbert.distribute import model_strategy, remove_worker_directory, worker_directory
from kbert.optimization import batches_trained


class TensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` that writes every epoch and continues its curves across `fit` calls.

    Two things differ from Keras' callback:

    - Every epoch writes its summaries: `epoch_loss`, `epoch_accuracy`,
      ..., `epoch_learning_rate` in the `train` run and the validation
      metrics (without their `val_` prefix) in the `validation` run,
      numbered by epoch. Keras' callback only writes them when the epoch's
      last batch number is a multiple of `update_freq` (its batch-summary
      filter is still on at the epoch end), so with `update_freq=50` a
      24-batch epoch showed no epoch curve at all. The same goes for the
      `evaluation_*_vs_iterations` summaries of each validation.
    - Keras numbers batch summaries (`batch_loss`, ...) from 1 in every
      `fit`, so a run resumed from a backup, or a model trained by several
      `fit` calls, draws its curves on top of the earlier ones. This
      callback starts the numbering at the optimizer's `iterations` instead,
      so the summary of an update is at the optimizer step it leads to
      (with the default `steps_per_execution=1`). Put it after
      `BackupAndRestore`, which restores `iterations`. `profile_batch`
      counts in the same numbering.

    Batch summaries are written every `update_freq` batches, as in Keras.
    Under several workers (`tf.distribute.MultiWorkerMirroredStrategy`) only
    the chief writes to `log_dir`; the other workers write to temporary
    directories that are removed when `fit` ends. Takes the arguments of
    `keras.callbacks.TensorBoard`.

    Example:
    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> tensorboard = TensorBoard(tempfile.mkdtemp(), update_freq=1)
    >>> for _ in range(2):
    ...     _ = model.fit(np.zeros((4, 3)), np.zeros(4), batch_size=2, verbose=0,
    ...                   callbacks=[tensorboard])
    >>> tensorboard._global_train_batch  # the second fit wrote steps 3 and 4
    4
    """

    def set_model(self, model):
        # Keras writes under `log_dir` from here on (the model's summary first).
        # (Keras calls this again for validation: the same directory then.)
        if getattr(self, "_write_dir", None) is None:
            self._write_dir = worker_directory(self.log_dir, model_strategy(model))
        log_dir, self.log_dir = self.log_dir, self._write_dir
        try:
            super().set_model(model)
        finally:
            self.log_dir = log_dir

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        remove_worker_directory(self._write_dir, self.log_dir)
        self._write_dir = None

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        optimizer = self.model.optimizer
        if optimizer is not None:
            self._global_train_batch = batches_trained(optimizer)

    def on_test_end(self, logs=None):
        # Keras' own method, with the summaries recorded whatever the batch filter says.
        if logs and self.model.optimizer is not None and hasattr(self.model.optimizer, "iterations"):
            with self._val_writer.as_default(), self.summary.record_if(True):
                for name, value in logs.items():
                    self.summary.scalar(
                        f"evaluation_{name}_vs_iterations", value, step=self.model.optimizer.iterations
                    )
        self._pop_writer()

    def _log_epoch_metrics(self, epoch, logs):
        # At an epoch end the writer Keras pushed for the last batch is still
        # active, with its `record_if(step % update_freq == 0)` filter; the
        # epoch summaries must not depend on it.
        with self.summary.record_if(True):
            super()._log_epoch_metrics(epoch, logs)
