"""A run's hyper-parameters and final metrics, for TensorBoard's HParams dashboard."""

import numbers

import keras
import numpy as np

from kbert.callbacks.writers import LazyWriters

RUN = "hparams"


class HParamsLogger(keras.callbacks.Callback):
    """Writes the hyper-parameters of a `fit` and its final metrics for TensorBoard's HParams dashboard.

    Everything goes to the run `log_dir/hparams`, which TensorBoard's HParams
    plugin shows as one session (a row of its table, a line of its
    parallel-coordinates view):

    - when training begins, the hyper-parameters (`tensorboard.plugins.
      hparams.api.hparams`);
    - when it ends, the last epoch's logs as scalars, named as `History`
      names them (`loss`, `accuracy`, `val_loss`, `val_accuracy`, ...;
      not the learning rate, nor a name that is a hyper-parameter's);
    - whatever `log_metrics` is given later, e.g. scores on a test split
      computed after `fit` (`kbert train` adds the evaluation split's, as
      `dev_accuracy`, `test_f1`, ...).

    The HParams plugin takes every scalar of the session's run as a metric.
    Give each run its own `log_dir` (the one of its `TensorBoard` callback)
    and point TensorBoard at their parent to compare runs.

    Args:
        log_dir: TensorBoard's log directory of the run.
        hparams: a dict `{name: value}`; values are numbers, strings or
            booleans (NumPy scalars too); `None` values are left out.
        trial_id: a name for the session; default: a hash of `hparams`.

    Example:
    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> logger = HParamsLogger(tempfile.mkdtemp(), {"optimizer": "sgd", "batch_size": 2})
    >>> _ = model.fit(np.zeros((4, 3)), np.zeros(4), batch_size=2, epochs=2, verbose=0,
    ...               callbacks=[logger])
    >>> logger.log_metrics({"test_loss": 0.5})
    >>> sorted(logger.metrics)
    ['loss', 'test_loss']
    """

    def __init__(self, log_dir, hparams, trial_id=None):
        super().__init__()
        if not isinstance(hparams, dict):
            raise TypeError(f"`hparams` must be a dict {{name: value}}, got a {type(hparams).__name__}.")
        self.log_dir = str(log_dir)
        self.hparams = {str(name): _hparam_value(name, value)
                        for name, value in hparams.items() if value is not None}
        self.trial_id = trial_id
        self.metrics = {}
        self._writers = LazyWriters(self.log_dir)
        self._written = False
        self._last_epoch = None
        self._last_logs = None

    def write_hparams(self):
        """Writes the hyper-parameters (once; `fit` calls it when training begins)."""
        if self._written:
            return
        from tensorboard.plugins.hparams import api as hp

        with self._writers.writing(RUN):
            hp.hparams(self.hparams, trial_id=self.trial_id)
        self._written = True

    def log_metrics(self, metrics, step=None):
        """Writes `{name: number}` as the session's metrics; other values are skipped.

        `step` defaults to the number of epochs trained (0 before `fit`).
        """
        import tensorflow as tf

        self.write_hparams()
        if step is None:
            step = 0 if self._last_epoch is None else self._last_epoch + 1
        numbers_only = {str(name): float(value) for name, value in metrics.items()
                        if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, bool)}
        with self._writers.writing(RUN):
            for name, value in numbers_only.items():
                tf.summary.scalar(name, value, step=step)
        self.metrics.update(numbers_only)
        self._writers.close()

    def on_train_begin(self, logs=None):
        self.write_hparams()

    def on_epoch_end(self, epoch, logs=None):
        self._last_epoch = epoch
        self._last_logs = dict(logs or {})

    def on_train_end(self, logs=None):
        # The learning rate is a setting, not a result (and 0 at the end of a decay).
        final = {name: value for name, value in (self._last_logs or {}).items()
                 if name != "learning_rate" and name not in self.hparams}
        if final:
            self.log_metrics(final)
        self._writers.close()


def _hparam_value(name, value):
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (bool, int, float, str)):
        raise TypeError(
            f"Hyper-parameter {name!r} is a {type(value).__name__} ({value!r}); TensorBoard takes "
            "numbers, strings and booleans (write it as a string)."
        )
    return value
