"""Puts the optimizer's learning rate into the training logs."""

import keras
import numpy as np

from kbert.callbacks.training_step import TrainingStepCallback


class LearningRateLogger(TrainingStepCallback):
    """Adds `learning_rate` to the logs at the end of every batch and epoch.

    Keras hands one logs dict down the callback list, so callbacks after this
    one see the learning rate too: put it before `TensorBoard` to get a
    `steps/learning_rate` curve next to `steps/loss_running_mean` (Keras'
    TensorBoard only writes the learning rate of each epoch by itself), and
    `History` records it per epoch.

    The value is the optimizer's current learning rate: a schedule evaluated at
    `optimizer.iterations`, or the plain rate. At the end of batch `i` of a
    fresh `fit` that is the schedule at step `i + 1`, the rate of the next
    update, and the same value Keras' TensorBoard reports at epoch ends.
    TensorBoard numbers that batch `i + 1` as well. The rate of each batch is
    computed on the host, from the optimizer as read once an epoch
    (`TrainingStepCallback`): no work on the model between two steps.

    Example:
    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(0.1), loss="mse")
    >>> history = model.fit(np.zeros((4, 3)), np.zeros(4), epochs=2, verbose=0,
    ...                     callbacks=[LearningRateLogger()])
    >>> [round(rate, 3) for rate in history.history["learning_rate"]]
    [0.1, 0.1]
    """

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if logs is not None:
            logs["learning_rate"] = self.learning_rate()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = self.current_learning_rate()

    def current_learning_rate(self):
        """The learning rate of the model's optimizer now, as a Python float."""
        # `Optimizer.learning_rate` evaluates a schedule at `iterations`, reads
        # a variable rate, and reaches through `LossScaleOptimizer`.
        rate = self.model.optimizer.learning_rate
        return float(np.asarray(keras.ops.convert_to_numpy(rate)))
