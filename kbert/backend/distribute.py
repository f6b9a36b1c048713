"""Training on several devices and machines: `tf.distribute` on TensorFlow, `keras.distribution` on JAX.

`make_strategy(name)` gives the strategy `kbert pretrain --strategy` and
`kbert train --strategy` use: the default one, `MirroredStrategy` (the
devices of one machine), `MultiWorkerMirroredStrategy` (workers described by
`TF_CONFIG`, checked before TensorFlow connects them) or `TPUStrategy`.
Build and compile a model inside `strategy.scope()`; its `fit` then trains
on every replica. On JAX, `mirrored` and `tpu` are Keras'
`keras.distribution.DataParallel` over this machine's devices (its GPUs,
or a TPU VM's TPU cores), which has a `scope()` too: each batch is split
across the devices, the weights are replicated.

Keras 3.15's own `fit` fails under `MultiWorkerMirroredStrategy`
(keras-team/keras#20585): it reduces the first batch and the step's scalar
logs in ways collective ops refuse. `MultiWorkerFit`, a base of kbert's
models, changes those two places, only under that strategy; the rest of
`fit` (callbacks, validation, `steps_per_execution`) is Keras' own.

Under several workers, files are written by the chief only, as TensorFlow's
multi-worker checkpointing expects: every worker saves (saving may read
variables through collective ops, which all workers must run together), the
chief into the real path and the others into a temporary directory of their
own that is removed afterwards (`write_on_chief`, `worker_directory`).
"""

import errno
import json
import os
import shutil
import socket
import tempfile
import time

# TensorFlow and Keras are imported where they are used: `kbert --help` reads
# `STRATEGIES` and must stay instant.

STRATEGIES = ("default", "mirrored", "multi-worker", "tpu")
# How long a worker waits for the others to start before it gives up.
DEFAULT_CONNECT_TIMEOUT = 600.0


def make_strategy(name=None, connect_timeout=DEFAULT_CONNECT_TIMEOUT, tpu=None):
    """The `tf.distribute` strategy of a name in `STRATEGIES`.

    Args:
        name: `"default"` (the current strategy: one device, or the scope
            already entered), `"mirrored"` (every GPU of this machine, or its
            CPU), `"multi-worker"` (the cluster in `TF_CONFIG`) or `"tpu"`
            (`TPUStrategy` on the TPU named by `tpu`, default the local TPU
            VM's). `None` is `"multi-worker"` when `TF_CONFIG` names a
            cluster, else `"default"`.
        connect_timeout: seconds a worker waits for the other workers of
            `TF_CONFIG` to listen on their ports; after it, a `TimeoutError`
            names the ones that did not (TensorFlow itself would wait
            forever).
        tpu: the TPU's name or address for `"tpu"`.

    Example:
    >>> make_strategy("default").num_replicas_in_sync
    1
    """
    if name is None:
        name = "multi-worker" if os.environ.get("TF_CONFIG") else "default"
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; the strategies are {list(STRATEGIES)}.")
    if not on_tensorflow():
        return _keras_distribution(name)
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    cluster, task_type, task_index = read_tf_config()
    wait_for_workers(cluster, task_type, task_index, connect_timeout)
    return tf.distribute.MultiWorkerMirroredStrategy()


def _keras_distribution(name):
    """`keras.distribution`'s counterpart of strategy `name` on JAX; PyTorch trains on one device."""
    import keras

    if name == "default":
        return _NoDistribution()
    backend = keras.config.backend()
    if backend != "jax" or name == "multi-worker":
        raise ValueError(
            f"The {name!r} strategy is for the tensorflow backend (tf.distribute)"
            + (", and 'mirrored' and 'tpu' for jax (keras.distribution.DataParallel)" if backend == "jax" else "")
            + f"; Keras runs on {backend}: train with the default strategy, or choose another backend."
        )
    return keras.distribution.DataParallel(devices=keras.distribution.list_devices())


class _NoDistribution:
    """The default strategy off TensorFlow: one device, and a `scope()` that changes nothing."""

    num_replicas_in_sync = 1

    def scope(self):
        import contextlib

        return contextlib.nullcontext()


def read_tf_config(text=None):
    """`(cluster, task_type, task_index)` of `TF_CONFIG` (or `text`), checked.

    `cluster` maps task types (`"chief"`, `"worker"`) to lists of
    `host:port`. Errors name what is wrong: not JSON, no cluster, a task
    type or index that the cluster does not have, an address without a port.
    """
    text = os.environ.get("TF_CONFIG") if text is None else text
    if not text:
        raise ValueError("The multi-worker strategy needs TF_CONFIG, the cluster and this worker's "
                         'place in it: {"cluster": {"worker": ["host:port", ...]}, '
                         '"task": {"type": "worker", "index": i}}.')
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not JSON ({error}): {text!r}.") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not any(cluster.get(kind) for kind in ("chief", "worker")):
        raise ValueError(f"TF_CONFIG has no cluster of workers: {text!r}.")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(f'TF_CONFIG has no task {{"type": ..., "index": ...}}: {text!r}.')
    task_type, task_index = task["type"], task["index"]
    members = cluster.get(task_type)
    if not members:
        raise ValueError(f"TF_CONFIG's task type {task_type!r} is not in its cluster "
                         f"({sorted(cluster)}).")
    if not isinstance(task_index, int) or not 0 <= task_index < len(members):
        raise ValueError(f"TF_CONFIG's task is {task_type} {task_index!r}, but the cluster has "
                         f"{len(members)} {task_type}(s), numbered 0 to {len(members) - 1}.")
    for kind, addresses in cluster.items():
        for address in addresses:
            if not isinstance(address, str) or not address.rpartition(":")[2].isdigit():
                raise ValueError(f"TF_CONFIG's {kind} address {address!r} is not host:port.")
    return cluster, task_type, task_index


def wait_for_workers(cluster, task_type, task_index, timeout=DEFAULT_CONNECT_TIMEOUT):
    """Waits until every other task of `cluster` listens on its port.

    This task listens on its own port meanwhile (TensorFlow's server takes
    it over afterwards), so the tasks find each other whatever the order they
    start in. A port this task cannot take (another process, or a second
    worker started with the same index) is a `ValueError`; tasks still silent
    after `timeout` seconds are a `TimeoutError`.
    """
    own = cluster[task_type][task_index]
    others = [(kind, i, address) for kind, addresses in cluster.items()
              for i, address in enumerate(addresses) if (kind, i) != (task_type, task_index)]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            listener.bind(("", int(own.rpartition(":")[2])))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise ValueError(f"This {task_type} {task_index}'s address {own} is in use: another "
                             "process holds the port, or another task was started with the same "
                             "TF_CONFIG task.") from None
        listener.listen(16)
        deadline = time.monotonic() + timeout
        waiting = list(others)
        while waiting:
            waiting = [task for task in waiting if not _accepts(task[2])]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(f"{kind} {i} at {address}" for kind, i, address in waiting)
                raise TimeoutError(f"No answer within {timeout:g} s from {names}: check that every "
                                   "task of TF_CONFIG runs, that the addresses are right and that "
                                   "their ports are reachable from here.")
            if waiting:
                time.sleep(0.2)
    finally:
        listener.close()


def _accepts(address):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def on_tensorflow():
    """Whether Keras runs on TensorFlow, the backend of `tf.distribute` (JAX has `keras.distribution`)."""
    import keras

    return keras.config.backend() == "tensorflow"


def model_strategy(model):
    """The `tf.distribute` strategy `model` trains under; None on another backend."""
    return getattr(model, "distribute_strategy", None) if on_tensorflow() else None


def is_multi_worker(strategy=None):
    """Whether `strategy` (default: the current one) trains on several workers; never off TensorFlow."""
    if not on_tensorflow():
        return False
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


def worker_role(strategy=None):
    """`(task_type, task_index, is_chief)` of this process; `("worker", 0, True)` alone."""
    if not is_multi_worker(strategy):
        return "worker", 0, True
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    resolver = strategy.cluster_resolver
    task_type, task_index = resolver.task_type, int(resolver.task_id)
    has_chief = bool(resolver.cluster_spec().as_dict().get("chief"))
    chief = task_type == "chief" or (not has_chief and task_type == "worker" and task_index == 0)
    return task_type, task_index, chief


def chief_by_tf_config(name=None):
    """Whether this process will be the chief under `make_strategy(name)`, told from `TF_CONFIG` alone.

    For a command that must know before TensorFlow connects the workers
    (the chief alone holds the run folder's lock). Only a multi-worker
    strategy has other workers; a `TF_CONFIG` that `read_tf_config`
    refuses counts as the chief's (`make_strategy` then reports it).
    """
    if name is None:
        name = "multi-worker" if os.environ.get("TF_CONFIG") else "default"
    if name != "multi-worker":
        return True
    try:
        cluster, task_type, task_index = read_tf_config()
    except ValueError:
        return True
    if cluster.get("chief"):
        return task_type == "chief"
    return task_type == "worker" and task_index == 0


def is_chief(strategy=None):
    """Whether this process writes the run's files: always, unless it is a worker besides the chief."""
    return worker_role(strategy)[2]


def worker_directory(directory, strategy=None):
    """`directory` for the chief; for the other workers, a new temporary directory of their own.

    The other workers' copies are TensorFlow's convention for multi-worker
    files: they write as the chief does (keeping the collective ops in step),
    then `remove_worker_directory` deletes what they wrote.
    """
    if is_chief(strategy):
        return os.fspath(directory)
    task_type, task_index, _ = worker_role(strategy)
    return tempfile.mkdtemp(prefix=f"kbert-{task_type}{task_index}-")


def remove_worker_directory(path, directory):
    """Removes `path` when it is another worker's temporary copy of `directory`."""
    if os.fspath(path) != os.fspath(directory):
        shutil.rmtree(path, ignore_errors=True)


def write_on_chief(path, write, strategy=None):
    """`write_atomically(path, write)` on the chief; on the other workers, into a copy then removed."""
    from kbert.io.atomic_files import write_atomically

    directory = os.path.dirname(os.path.abspath(path))
    target = worker_directory(directory, strategy)
    try:
        write_atomically(os.path.join(target, os.path.basename(path)), write)
    finally:
        remove_worker_directory(target, directory)


def agreed_seed(strategy=None):
    """A random seed, the same on every worker: the chief's."""
    import numpy as np

    # NumPy's generator: reproducible after `keras.utils.set_random_seed`.
    seed = int(np.random.randint(2**31 - 1))
    if not is_multi_worker(strategy):
        return seed
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    mine = tf.constant(seed if is_chief(strategy) else 0, tf.int64)
    return int(strategy.reduce("SUM", strategy.run(lambda: mine), axis=None))


def all_workers(value, strategy=None):
    """The integer `value` of every replica (one per replica, in replica order), gathered everywhere."""
    if not is_multi_worker(strategy):
        return [int(value)]
    import tensorflow as tf

    strategy = strategy or tf.distribute.get_strategy()
    mine = tf.constant([int(value)], tf.int64)
    return [int(v) for v in strategy.gather(strategy.run(lambda: mine), axis=0).numpy()]


class MultiWorkerFit:
    """Makes Keras' `fit` and `evaluate` work under `MultiWorkerMirroredStrategy`.

    A base class of kbert's models (before `keras.Model`). Keras 3.15 fails
    there (keras-team/keras#20585) in two places, which this class changes
    only when the model's strategy spans several workers:

    - before the first step, Keras all-reduces the first batch across
      replicas to build the model's metrics (a structure of `PerReplica`
      values that the collective reduce refuses); here this worker's own
      part of the batch is used, which has the same shapes;
    - after each step, Keras averages the logs across replicas along axis 0,
      which scalars do not have; here each replica returns its logs with a
      leading axis of 1, so that average is the mean over the replicas.

    `predict_on_batch` predicts the batch it is given on this worker alone
    (Keras would run the whole batch on every replica and return all the
    copies). `fit` also runs inside the strategy's scope there, so that callbacks
    can tell the chief from the other workers (`is_chief()`). Under any
    strategy, an optimizer with `gradient_accumulation_steps` is refused up
    front: Keras 3.15's accumulation fails there, deep inside the first step.
    `fit` also builds the optimizer, metrics and losses before the first
    step is traced (`kbert.backend.build_before_first_step`).

    Everything else (the step, the loss scaling by the number of replicas,
    the all-reduce of the gradients, callbacks) is Keras' own. A test fails
    once plain Keras `fit` trains under this strategy, and this class can go.

    Example:
    >>> class Model(MultiWorkerFit, keras.Model):
    ...     pass
    >>> inputs = keras.Input((3,))
    >>> model = Model(inputs, keras.layers.Dense(1)(inputs))
    >>> model.compile("sgd", loss="mse")
    >>> history = model.fit(np.zeros((4, 3)), np.zeros(4), verbose=0)
    """

    def fit(self, *args, **kwargs):
        optimizer = getattr(self, "optimizer", None)
        if getattr(optimizer, "gradient_accumulation_steps", None) and getattr(self, "_distribute_strategy", None):
            raise ValueError(
                "Keras cannot accumulate gradients under a tf.distribute strategy (its update makes "
                "a cross-replica call inside a conditional, which TensorFlow refuses); compile "
                "without gradient_accumulation_steps, or train outside the strategy's scope."
            )
        from kbert.backend import build_before_first_step

        build_before_first_step(self, args[0] if args else kwargs.get("x"))
        if not is_multi_worker(model_strategy(self)):
            return super().fit(*args, **kwargs)
        # Inside the scope, callbacks know this process' role (`is_chief()`).
        with self.distribute_strategy.scope():
            return super().fit(*args, **kwargs)

    def predict_on_batch(self, x):
        import keras

        if not is_multi_worker(model_strategy(self)):
            return super().predict_on_batch(x)
        # Keras would give the whole batch to every replica and gather the copies.
        # A batch given by hand is this worker's own: it predicts it alone.
        return keras.tree.map_structure(keras.ops.convert_to_numpy, self(x, training=False))

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        import keras

        if iterator is None or not is_multi_worker(model_strategy(self)):
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        for _, _, batches in iterator:
            local = self.distribute_strategy.experimental_local_results
            data_batch = keras.tree.map_structure(lambda value: local(value)[0], next(batches))
            break
        return super()._maybe_symbolic_build(data_batch=data_batch)

    # `*args`: the steps take `(state, data)` on JAX, where results pass through.
    def train_step(self, *args):
        return self._logs_per_replica(super().train_step(*args))

    def test_step(self, *args):
        return self._logs_per_replica(super().test_step(*args))

    def _logs_per_replica(self, logs):
        if not is_multi_worker(model_strategy(self)):
            return logs
        import keras
        import tensorflow as tf

        return keras.tree.map_structure(
            lambda value: tf.reshape(value, [1]) if value.shape.rank == 0 else value, logs
        )


def distributed_stream(strategy, stream, start):
    """What `Pretrainer.fit` trains on: `stream(start)`, or each worker's part of it.

    A stream of prepared TFRecords (`stream.splits_by_file`) under several
    workers is split by file: each worker builds its own part
    (`strategy.distribute_datasets_from_function`). Other streams are given
    whole; Keras distributes them, each worker taking its part of every
    batch.
    """
    if is_multi_worker(strategy) and getattr(stream, "splits_by_file", False):
        return strategy.distribute_datasets_from_function(lambda context: stream(start, context))
    return stream(start)
