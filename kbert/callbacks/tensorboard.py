"""Keras' TensorBoard callback, numbering batch summaries by optimizer step."""

import keras


class TensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` whose batch summaries continue across `fit` calls.

    Keras numbers batch-level summaries (`batch_loss`, ...) from 1 in every
    `fit`, so a run resumed from a backup, or a model trained by several
    `fit` calls, draws its curves on top of the earlier ones. This callback
    starts the numbering at the optimizer's `iterations` instead, so the
    summary of an update is at the optimizer step it leads to (with the
    default `steps_per_execution=1`). Put it after `BackupAndRestore`, which
    restores `iterations`. Epoch summaries keep the epoch as their step.
    `profile_batch` counts in the same numbering.

    Takes the arguments of `keras.callbacks.TensorBoard`.

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

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        optimizer = self.model.optimizer
        if optimizer is not None:
            self._global_train_batch = int(keras.ops.convert_to_numpy(optimizer.iterations))
