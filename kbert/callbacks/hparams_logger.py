"""A run's hyper-parameters and final metrics, for TensorBoard's HParams dashboard."""

import numbers

import keras
import numpy as np

from kbert.callbacks.writers import LazyWriters

RUN = "hparams"
# Tag prefixes: sorted by name, the scores come before the training logs.
SCORE_GROUP = "score"
TRAINING_GROUP = "training"


class HParamsLogger(keras.callbacks.Callback):
    """Writes the hyper-parameters of a `fit` and its results for TensorBoard's HParams dashboard.

    Everything goes to the run `log_dir/hparams`, which the HParams plugin
    shows as one session (a row of its table, a line of its
    parallel-coordinates view), named after the run (`runs/a/tensorboard/
    hparams` with `tensorboard --logdir runs`) unless a `trial_id` is given:

    - when training begins, the hyper-parameters (`tensorboard.plugins.
      hparams.api.hparams`);
    - when it ends, the last epoch's logs as scalars `training/loss`,
      `training/accuracy`, `training/val_loss`, ... (not the learning rate,
      nor a name that is a hyper-parameter's);
    - whatever `log_metrics` is given later, as `score/<name>`, e.g. scores
      on a test split computed after `fit` (`kbert train` adds its
      evaluation split's: `score/test_f1_spam`, `score/dev_accuracy`, ...);
    - the `headline` metric (a name given to `log_metrics`, or a log of the
      last epoch such as `val_accuracy`) once more as `score`.

    The plugin takes every scalar of the session's run as a metric, sorted
    by name, and shows the first five: `score` first, then the other
    scores, then the training logs. In Time Series these single-point
    cards sort after the `epoch/...` curves of kbert's `TensorBoard`.
    Give each run its own `log_dir` (the one of its `TensorBoard` callback)
    and point TensorBoard at their parent to compare runs.

    Args:
        log_dir: TensorBoard's log directory of the run.
        hparams: a dict `{name: value}`; values are numbers, strings or
            booleans (NumPy scalars too); `None` values are left out.
        trial_id: the name of the session's row; default `""`: the run's
            path under TensorBoard's log dir, so no two runs share a row.
            Runs given the same `trial_id` are one row (their mean).
        headline: the name of the metric to show first, as `score`.

    Example:
    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> logger = HParamsLogger(tempfile.mkdtemp(), {"optimizer": "sgd", "batch_size": 2},
    ...                        headline="test_loss")
    >>> _ = model.fit(np.zeros((4, 3)), np.zeros(4), batch_size=2, epochs=2, verbose=0,
    ...               callbacks=[logger])
    >>> logger.log_metrics({"test_loss": 0.5})
    >>> sorted(logger.metrics)
    ['score', 'score/test_loss', 'training/loss']
    """

    def __init__(self, log_dir, hparams, trial_id="", headline=None):
        super().__init__()
        if not isinstance(hparams, dict):
            raise TypeError(f"`hparams` must be a dict {{name: value}}, got a {type(hparams).__name__}.")
        if not isinstance(trial_id, str):
            raise TypeError(f"`trial_id` must be a string, got {trial_id!r}.")
        self.log_dir = str(log_dir)
        self.hparams = {str(name): _hparam_value(name, value)
                        for name, value in hparams.items() if value is not None}
        self.trial_id = trial_id
        self.headline = None if headline is None else str(headline)
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
            # An empty trial id leaves the session's group unnamed, and the
            # plugin then names the row after the session's run.
            hp.hparams(self.hparams, trial_id=self.trial_id)
        self._written = True

    def log_metrics(self, metrics, step=None):
        """Writes `{name: number}` as the session's metrics `score/<name>`; other values are skipped.

        `step` defaults to the number of epochs trained (0 before `fit`).
        """
        self._write(SCORE_GROUP, metrics, step)

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
            self._write(TRAINING_GROUP, final)
        self._writers.close()

    def _write(self, group, metrics, step=None):
        import tensorflow as tf

        self.write_hparams()
        if step is None:
            step = 0 if self._last_epoch is None else self._last_epoch + 1
        numbers_only = {str(name): float(value) for name, value in metrics.items()
                        if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, bool)}
        tags = {f"{group}/{name}": value for name, value in numbers_only.items()}
        if self.headline in numbers_only:
            tags[SCORE_GROUP] = numbers_only[self.headline]
        with self._writers.writing(RUN):
            for tag, value in tags.items():
                description = f"{self.headline}, the headline metric" if tag == SCORE_GROUP else None
                tf.summary.scalar(tag, value, step=step, description=description)
        self.metrics.update(tags)
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
