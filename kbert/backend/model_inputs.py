"""What Keras takes as data, beside kbert's raw text: token ids, and how many batches they make."""

import collections.abc
import math

import keras

from kbert.backend.tensorflow_support import is_tf_dataset

# Keras' own batch size when `fit` gets arrays and no `batch_size`.
KERAS_DEFAULT_BATCH_SIZE = 32


def is_token_ids(x):
    """Whether `x` is model inputs for Keras as it is, not raw examples for the task preprocessor.

    Model inputs are a dict of arrays (`token_ids`, `segment_ids`,
    `padding_mask`), or an iterable of batches of them that Keras reads
    itself: a generator or other iterator, a `keras.utils.PyDataset`, a
    PyTorch `DataLoader`. A `tf.data.Dataset` goes to `task_dataset`, which
    passes batches of model inputs through.
    """
    if isinstance(x, collections.abc.Mapping) or isinstance(x, keras.utils.PyDataset):
        return True
    if isinstance(x, collections.abc.Iterator):
        return True
    return type(x).__module__.startswith("torch.utils.data")


def is_packed(inputs):
    """Whether model inputs (a dict) are a packed batch, several examples to a row (`kbert.preprocessing.packing`)."""
    return isinstance(inputs, collections.abc.Mapping) and "cls_positions" in inputs


def known_steps(x, batch_size):
    """Batches per epoch of a dataset, of arrays or of a sized iterable of batches; `None` when unknown."""
    if is_tf_dataset(x):
        cardinality = int(x.cardinality())
        return cardinality if cardinality > 0 else None
    if isinstance(x, collections.abc.Mapping):
        leaves = keras.tree.flatten(x)
        if leaves and len(getattr(leaves[0], "shape", ())) > 0:
            return math.ceil(int(leaves[0].shape[0]) / (batch_size or KERAS_DEFAULT_BATCH_SIZE))
        return None
    if isinstance(x, keras.utils.PyDataset):
        return x.num_batches
    try:
        return len(x)
    except TypeError:
        return None


def one_iterator(dataset, steps=None):
    """`(dataset, steps)` for Keras to read `dataset` through one iterator, not one more per pass.

    Keras' loops start the next pass's iterator as soon as a dataset of
    known length runs out: the one after `predict`, `evaluate` or the last
    epoch of `fit` is never read, and each epoch of `fit` starts a new one.
    Each iterator of a `tf.data` pipeline of text instantiates its graph
    (the tokenizer's) anew, which costs as much as reading a small input.
    Repeated, with its number of batches as the steps of a pass, the dataset
    is read through the one iterator Keras starts (a pass reshuffles as a
    new iterator would). A dataset of unknown length, or `steps` given, is
    left as it is.

    Example:
    >>> import tensorflow as tf
    >>> dataset, steps = one_iterator(tf.data.Dataset.range(10).batch(4))
    >>> steps, int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY
    (3, True)
    >>> one_iterator([1, 2, 3], steps=None)  # not a dataset: as it is
    ([1, 2, 3], None)
    """
    known = known_steps(dataset, None) if is_tf_dataset(dataset) else None
    if steps is not None or known is None:
        return dataset, steps
    return dataset.repeat(), known
