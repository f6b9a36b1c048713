"""The `tf.data` input pipeline of kbert's task models: raw examples to batches of model inputs."""

import math
import weakref

import tensorflow as tf

from kbert.backend import COMPILES_EACH_SHAPE
from kbert.preprocessing.packing import pack_batch

DEFAULT_BATCH_SIZE = 32
# Training batches are cut from groups of this many batches sorted by length
# (similar lengths share a batch, so little of each batch is padding).
LENGTH_GROUP_BATCHES = 50
# Batches are padded to their longest example rounded up to this multiple.
PAD_TO_MULTIPLE = 8


def task_dataset(preprocessor, x, y=None, sample_weight=None, batch_size=None, shuffle=False,
                 seed=None, packing=False):
    """What a task model's `fit`, `evaluate` and `predict` run on: a `tf.data.Dataset` of batches.

    The task preprocessor says what its raw examples are and how a batch of
    them becomes model inputs (its forward step); this function does the
    rest, the same way for every task:

    1. `x` (and `y`, `sample_weight`) in the forms the task accepts (lists
       of texts, text pairs, sentences of words, question records, ...) are
       checked by `preprocessor.examples` and sliced into a dataset; a
       `tf.data.Dataset` of raw examples is taken as it is (batched or not);
    2. with `shuffle`, the examples are shuffled every epoch; for tasks
       that pad to the longest example, groups of `LENGTH_GROUP_BATCHES`
       batches are sorted by length and cut into batches, which are then
       shuffled, so that a batch holds examples of similar length;
    3. each batch goes through the preprocessor's forward step in parallel
       (`num_parallel_calls=AUTOTUNE`): tokenizing, packing, targets;
    4. batches are padded only to their longest example, rounded up to a
       multiple of `PAD_TO_MULTIPLE` (on JAX to a power of two: see
       `padded_length`; for tasks whose outputs do not depend on padding),
       and prefetched.

    With `packing=True` (classification, tagging, question answering,
    multiple choice), each batch of `batch_size` examples (for question
    answering, `batch_size` windows; for multiple choice, its examples'
    choices) is packed instead: several examples share a row of up to
    `sequence_length` tokens, and the model computes each one as if it were
    alone (`kbert.preprocessing.packing`). Batches are then not grouped by
    length: packing leaves little padding without it.

    Under a `tf.distribute` strategy of several workers, each worker takes
    its part of every batch (data sharding): all workers must read the same
    batches, so they shuffle with the same `seed`.

    A dataset whose elements are model inputs already (a dict of
    `token_ids`, ...) is returned unchanged.

    Args:
        preprocessor: a task preprocessor, e.g. `model.preprocessor`.
        x: the inputs, in any form the task's `fit` takes.
        y: the targets, when they are not part of `x`.
        sample_weight: one weight per example (per word for a tagger).
        batch_size: examples per batch (questions for question answering,
            which may give more windows); default the preprocessor's.
        shuffle: shuffle every epoch, with length grouping (training).
        seed: the shuffles' seed (each epoch still gets its own order);
            `None` for TensorFlow's.
        packing: pack each batch's examples into shared rows (training and
            evaluation; `predict` keeps one row per example).

    Returns:
        A `tf.data.Dataset` of `inputs` or `(inputs, targets)` or
        `(inputs, targets, sample_weight)`, with a known number of batches
        when `x` is not a dataset.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40, verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> batches = kbert.data.task_dataset(clf.preprocessor, ["a good film", "bad"], [1, 0])
    >>> inputs, labels = next(iter(batches))
    >>> inputs["token_ids"].shape, labels.numpy().tolist()
    (TensorShape([2, 8]), [1, 0])
    """
    batch_size = batch_size or preprocessor.default_batch_size
    if packing and not preprocessor.packs_examples:
        raise ValueError(f"packing=True: a {type(preprocessor).__name__}'s examples are not packed (packing is "
                         "for classification, tagging, question answering and multiple choice); train with "
                         "packing=False.")
    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise ValueError("With a tf.data.Dataset, put the targets in the dataset, not in `y`.")
        if is_preprocessed(x.element_spec):
            return x  # Keras' own evaluate inside fit, for one.
        return _model_input_batches(preprocessor, preprocessor.batch_dataset(x, batch_size), batch_size,
                                    packing=packing)
    examples = preprocessor.examples(x, y, sample_weight)
    return examples_dataset(preprocessor, examples, batch_size, shuffle=shuffle, seed=seed, packing=packing)


def examples_dataset(preprocessor, examples, batch_size=None, shuffle=False, seed=None, packing=False):
    """Steps 2 to 4 of `task_dataset`, on examples checked already: batches of model inputs.

    `examples` are `Examples` as a task preprocessor's `examples` gives
    them: a tuple of tensors, the features first; what follows them
    (targets, weights, or anything else with one entry per example, such
    as a teacher's logits) is sliced, shuffled and batched with them and
    passed through the preprocessor's `forward_batch` as it is.

    Returns:
        A `tf.data.Dataset` of `(inputs, *rest)` (or `inputs`), with a known
        number of batches.
    """
    batch_size = batch_size or preprocessor.default_batch_size
    dataset = tf.data.Dataset.from_tensor_slices(examples.tensors)
    if shuffle:
        dataset = dataset.shuffle(examples.count, seed=seed, reshuffle_each_iteration=True)
    group_by_length = shuffle and preprocessor.pads_to_longest and not packing
    group_size = batch_size * (LENGTH_GROUP_BATCHES if group_by_length else 1)
    batches = dataset.ragged_batch(group_size) if examples.ragged else dataset.batch(group_size)
    if group_by_length:
        batches = sort_into_batches(batches, preprocessor.example_lengths, batch_size)
    return _model_input_batches(preprocessor, batches, batch_size, examples, group_by_length, seed, packing)


def _model_input_batches(preprocessor, batches, batch_size, examples=None, group_by_length=False,
                         seed=None, packing=False):
    """Batches of raw examples through the forward step, padded (or packed), counted and prefetched."""

    mapped = batches.map(forward_function(preprocessor), num_parallel_calls=tf.data.AUTOTUNE)
    if examples is not None and examples.output_count != examples.count:
        # One example gave several (question windows): re-batch what it gave.
        mapped = mapped.unbatch().batch(batch_size)
    if packing:
        # Each row (a tagger's or a question's window, a choice) is an example of its own.
        width = preprocessor.packer.sequence_length
        per_token = preprocessor.per_token_targets
        mapped = mapped.map(lambda *batch: pack_batch(*batch, max_width=width, per_token_targets=per_token),
                            num_parallel_calls=tf.data.AUTOTUNE)
    if group_by_length:
        mapped = mapped.shuffle(LENGTH_GROUP_BATCHES, seed=seed, reshuffle_each_iteration=True)
    if examples is not None:
        # The learning-rate schedule counts on the number of steps.
        steps = math.ceil(examples.output_count / batch_size)
        mapped = mapped.apply(tf.data.experimental.assert_cardinality(steps))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return mapped.prefetch(tf.data.AUTOTUNE).with_options(options)


_FORWARD_FUNCTIONS = weakref.WeakKeyDictionary()


def forward_function(preprocessor):
    """`preprocessor.forward_batch` as a `tf.function`, one per preprocessor.

    The batch comes out cut to its longest example (`cut_padding`) where
    the preprocessor pads to the longest. `tf.data` traces what it maps
    anew for every dataset, and instantiates it for every iterator: for a
    task preprocessor's graph (tokenizing, packing, targets) that is most
    of a second, paid by every `fit`, `evaluate` and `predict` call.
    Mapping the same `tf.function` traces it once per batch structure; each
    dataset then traces only a call to it.
    """
    function = _FORWARD_FUNCTIONS.get(preprocessor)
    if function is None:
        # Preprocessing has no Python control flow on tensors: skipping
        # AutoGraph's conversion makes tracing faster.
        owner = weakref.ref(preprocessor)  # the function must not keep its preprocessor alive
        cuts = preprocessor.pads_to_longest

        def forward(*batch):
            outputs = owner().forward_batch(*batch)
            if not cuts:
                return outputs
            return cut_padding(*outputs) if isinstance(outputs, tuple) else cut_padding(outputs)

        function = tf.function(forward, autograph=False)
        _FORWARD_FUNCTIONS[preprocessor] = function
    return function


def padded_length(longest, compiles_each_shape=COMPILES_EACH_SHAPE):
    """The width a batch is padded to: its longest example, rounded up to `PAD_TO_MULTIPLE`.

    On a backend that compiles its step for each batch shape (JAX), to the
    next power of two instead: 8, 16, 32, ..., so that a training run
    compiles a handful of steps, not one per width.
    """
    if not compiles_each_shape:
        return -(-longest // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE
    longest = tf.cast(tf.maximum(tf.cast(longest, tf.int32), PAD_TO_MULTIPLE), tf.float64)
    # log2 of `longest - 0.5`: an exact power of two stays itself whatever the round-off.
    exponent = tf.math.ceil(tf.math.log(longest - 0.5) / math.log(2.0))
    return tf.cast(tf.pow(tf.constant(2.0, tf.float64), exponent), tf.int32)


def cut_padding(features, *rest):
    """Cuts the padding of a batch of model inputs to `padded_length` of its longest example."""
    mask = features["padding_mask"]
    # At least 1: an empty batch (a serving request) keeps a valid width.
    longest = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=-1)), 1)
    length = tf.minimum(padded_length(longest), tf.shape(mask)[-1])
    features = {name: value[..., :length] for name, value in features.items()}
    return (features, *rest) if rest else features


def sort_into_batches(groups, lengths, batch_size):
    """Sorts each group of examples by `lengths(*group)` and cuts it into batches.

    Ragged elements (sentences of words) are batched with `ragged_batch`.
    """

    def sort_by_length(*element):
        order = tf.argsort(lengths(*element), stable=True)
        # The element's structure as it is: a 1-tuple of text pairs stays one
        # (unwrapped, its second texts would pass for targets).
        return tf.nest.map_structure(lambda value: tf.gather(value, order), element)

    examples = groups.map(sort_by_length, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ragged = any(isinstance(spec, tf.RaggedTensorSpec) for spec in tf.nest.flatten(groups.element_spec))
    return examples.ragged_batch(batch_size) if ragged else examples.batch(batch_size)


def is_preprocessed(spec):
    """True for elements that are model inputs already (a dict of ids)."""
    features = spec[0] if isinstance(spec, tuple) else spec
    return isinstance(features, dict)
