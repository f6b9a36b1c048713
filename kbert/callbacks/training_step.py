"""The optimizer's step and learning rate at every batch of `fit`, known on the host."""

import keras

from kbert.models.optimization import WarmupLinearDecay, batches_trained, inner_optimizer


class TrainingStepCallback(keras.callbacks.Callback):
    """A base for callbacks that need the step (or the learning rate) at every batch, without reading the model.

    On JAX, `fit` keeps the variables out of the model during an epoch: a
    callback that reads `self.model` makes it put every variable back and
    take them out again, and reading `optimizer.iterations` waits for the
    step to finish. Done at every batch, that is host work between every
    two steps, which a GPU waits for.

    Here the optimizer is read once an epoch, at the end of its first batch
    (after every callback's `on_train_begin` and `on_epoch_begin`, so after a
    backup restored the step), and the batches are counted on the host after
    that. A subclass calls `super().on_train_batch_end` first, then reads:

    - `batches_trained`: the batches the optimizer has taken (with gradient
      accumulation, batches rather than updates);
    - `iterations`: the optimizer's `iterations` (its updates);
    - `learning_rate()`: the rate of the next update, on the host for a
      constant rate and for `kbert.models.optimization.WarmupLinearDecay` (other
      schedules are evaluated by the backend).

    Example:
    >>> class PrintsTheRate(kbert.callbacks.TrainingStepCallback):
    ...     def on_train_batch_end(self, batch, logs=None):
    ...         super().on_train_batch_end(batch, logs)
    ...         print(self.batches_trained, round(self.learning_rate(), 3))
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(0.1), loss="mse")
    >>> _ = model.fit(np.zeros((4, 3)), np.zeros(4), batch_size=2, verbose=0, callbacks=[PrintsTheRate()])
    1 0.1
    2 0.1
    """

    def on_epoch_begin(self, epoch, logs=None):
        self.batches_trained = None

    def on_train_batch_end(self, batch, logs=None):
        if getattr(self, "batches_trained", None) is None:
            self._read_optimizer(self.model.optimizer)
        else:
            self.batches_trained += 1

    @property
    def iterations(self):
        """The optimizer's `iterations` now: its updates, one per `gradient_accumulation_steps` batches."""
        return self.batches_trained // self._batches_per_update

    def learning_rate(self):
        """The learning rate of the optimizer's next update, as a Python float."""
        if isinstance(self._rate, WarmupLinearDecay):
            return self._rate.rate_at(self.batches_trained, self._window)
        if self._rate is not None:
            return self._rate
        return float(keras.ops.convert_to_numpy(self._schedule(self.batches_trained)))

    def _read_optimizer(self, optimizer):
        self.batches_trained = batches_trained(optimizer)
        inner = inner_optimizer(optimizer)
        self._batches_per_update = inner.gradient_accumulation_steps or 1
        self._schedule = getattr(inner, "_learning_rate", None)
        self._rate = self._window = None
        if isinstance(self._schedule, WarmupLinearDecay):
            # The window's variables, which a restored backup may have changed.
            self._rate = self._schedule
            self._window = tuple(int(keras.ops.convert_to_numpy(v)) for v in self._schedule.variables)
        elif not isinstance(self._schedule, keras.optimizers.schedules.LearningRateSchedule):
            self._rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
