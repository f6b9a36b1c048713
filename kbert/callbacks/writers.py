"""Summary writers that the TensorBoard callbacks of kbert open when they first write."""

import contextlib
import os


class LazyWriters:
    """One `tf.summary` file writer per run directory under `log_dir`, opened on first use.

    A callback that never writes leaves no empty event file behind, and a run
    may be written to again after `close` (a new event file is opened). The
    runs are the subdirectories Keras' TensorBoard uses (`train`,
    `validation`) or others (`hparams`); TensorBoard reads every event file
    of a run directory, so these files sit next to Keras' own.
    """

    def __init__(self, log_dir):
        self.log_dir = os.fspath(log_dir)
        self._writers = {}

    def __call__(self, run):
        """The writer of `log_dir/run`."""
        if run not in self._writers:
            import tensorflow as tf

            from kbert.backend.distribute import is_chief

            if is_chief():
                self._writers[run] = tf.summary.create_file_writer(os.path.join(self.log_dir, run))
            else:  # the run's other workers: only the chief writes
                self._writers[run] = tf.summary.create_noop_writer()
        return self._writers[run]

    @contextlib.contextmanager
    def writing(self, run):
        """A context in which `tf.summary` ops write to `log_dir/run`, always.

        Keras' TensorBoard leaves a `record_if` filter on during `fit` (its
        batch summaries every `update_freq` steps); summaries written here
        must not depend on it.
        """
        import tensorflow as tf

        writer = self(run)
        with writer.as_default(), tf.summary.record_if(True):
            yield writer
        writer.flush()

    def flush(self):
        for writer in self._writers.values():
            writer.flush()

    def close(self):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
