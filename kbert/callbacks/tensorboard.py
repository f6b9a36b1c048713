"""Keras' TensorBoard callback: every epoch's summaries written, curves named so they read first."""

import keras

from kbert.backend.distribute import model_strategy, remove_worker_directory, worker_directory
from kbert.models.optimization import batches_trained

# Values written as they are at a step, not averaged over the epoch so far.
_INSTANT_LOGS = ("learning_rate",)
_RUNNING_MEAN = ("Keras' running mean: the mean over this epoch's batches so far (it restarts with "
                 "each epoch), not the value of one batch.")


def epoch_tag(name):
    """The tag of a per-epoch curve, e.g. `epoch/loss`: all of them in TensorBoard's first group."""
    return f"epoch/{name}"


def step_tag(name, running_mean=True):
    """The tag of a curve numbered by optimizer step, e.g. `steps/loss_running_mean`.

    During an epoch Keras reports each metric as its mean over the epoch's
    batches so far (reset when an epoch begins), not the value of the last
    batch; the tag says so. `running_mean=False` for values that are not
    averaged: the learning rate, or a validation's loss after a step.
    """
    return f"steps/{name}_running_mean" if running_mean and name not in _INSTANT_LOGS else f"steps/{name}"


class TensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` whose curves read at a glance and continue across `fit` calls.

    Three things differ from Keras' callback:

    - The tags. TensorBoard's Time Series sorts its cards by tag, groups
      them by the part before the first `/` and opens only the first two
      groups; Keras' `epoch_loss`, `epoch_accuracy`, ... each make a group
      of their own, and single-point cards such as `accuracy` sort ahead of
      them. This callback writes the per-epoch curves as `epoch/loss`,
      `epoch/accuracy`, ..., `epoch/learning_rate` (`train` run; the
      validation metrics, without their `val_` prefix, in the `validation`
      run), one group that comes first. The curves numbered by optimizer
      step go to the group `steps`: every `update_freq` batches
      `steps/loss_running_mean`, ... (what Keras reports during an epoch: the
      mean over the epoch's batches so far, not one batch's value) and
      `steps/learning_rate`; after each validation, `steps/loss`, ... in the
      `validation` run (Keras' `evaluation_*_vs_iterations`). A model
      whose loss has a scale of its own names it with the attribute
      `summary_loss_name`: the `Pretrainer`'s curves are
      `epoch/pretraining_loss`, ..., so a fine-tuning run's `epoch/loss`
      beside it in one log dir keeps a card (and a scale) of its own.
    - Every epoch writes its summaries. Keras' callback only writes them
      when the epoch's last batch number is a multiple of `update_freq`
      (its batch-summary filter is still on at the epoch end), so with
      `update_freq=50` a 24-batch epoch showed no epoch curve at all.
    - Keras numbers batch summaries from 1 in every `fit`, so a run resumed
      from a backup, or a model trained by several `fit` calls, draws its
      curves on top of the earlier ones. This callback starts the numbering
      at the optimizer's `iterations` instead, so the summary of an update
      is at the optimizer step it leads to (with the default
      `steps_per_execution=1`). Put it after `BackupAndRestore`, which
      restores `iterations`. `profile_batch` counts in the same numbering.

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
    >>> epoch_tag("loss"), step_tag("loss")
    ('epoch/loss', 'steps/loss_running_mean')
    """

    def _renamed(self, logs):
        # A model may name its loss for summaries (`summary_loss_name`, e.g.
        # the pretrainer's `pretraining_loss`), so that runs of different
        # kinds in one log dir do not share the `loss` card and its scale.
        name = getattr(self.model, "summary_loss_name", "loss")
        return {(name if key == "loss" else key): value for key, value in logs.items()}

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

    def on_train_batch_end(self, batch, logs=None):
        # Keras' method does the graph, the steps per second and the profiler;
        # the logs are written here under their own tags.
        super().on_train_batch_end(batch, logs=None)
        if isinstance(logs, dict):
            for name, value in self._renamed(logs).items():
                self.summary.scalar(step_tag(name), value, step=self._global_train_batch,
                                    description=None if name in _INSTANT_LOGS else _RUNNING_MEAN)

    def on_test_end(self, logs=None):
        # Keras' own method, with the summaries recorded whatever the batch filter says.
        if logs and self.model.optimizer is not None and hasattr(self.model.optimizer, "iterations"):
            with self._val_writer.as_default(), self.summary.record_if(True):
                for name, value in self._renamed(logs).items():
                    self.summary.scalar(step_tag(name, running_mean=False), value,
                                        step=self.model.optimizer.iterations)
        self._pop_writer()

    def _log_epoch_metrics(self, epoch, logs):
        # Keras' method with kbert's tags. At an epoch end the writer Keras
        # pushed for the last batch is still active, with its
        # `record_if(step % update_freq == 0)` filter; the epoch summaries
        # must not depend on it.
        if not logs:
            return
        train_logs = self._collect_learning_rate(
            self._renamed({k: v for k, v in logs.items() if not k.startswith("val_")}))
        if self.write_steps_per_second:
            train_logs["steps_per_second"] = self._compute_steps_per_second()
        validation_logs = self._renamed({k[len("val_"):]: v for k, v in logs.items() if k.startswith("val_")})
        with self.summary.record_if(True):
            for writer, values in ((self._train_writer, train_logs), (self._val_writer, validation_logs)):
                if values:
                    with writer.as_default():
                        for name, value in values.items():
                            self.summary.scalar(epoch_tag(name), value, step=epoch)

