"""Base class of the task preprocessors: one task's forward and reverse steps."""

import collections

import keras
import numpy as np
import tensorflow as tf

from kbert.backend.tensorflow_bridge import model_outputs
from kbert.preprocessing.input_pipeline import DEFAULT_BATCH_SIZE
from kbert.preprocessing.preprocessing_layer import PreprocessingLayer
from kbert.preprocessing.text_packer import TextPacker, split_segments

MODEL_INPUTS = ("token_ids", "segment_ids", "padding_mask")
# Rows that `run_by_length` gives the model at once. Sorted by length, 4 rows
# need little padding, and two runs keep two cores busy side by side: for
# all-MiniLM-L6-v2 on requests of 8, 32 and 128 SST-2 sentences, runs of 4
# were the fastest of 2, 4, 8, 16 and 32, or within 12 % (2 cores, with one
# intra-op thread or TensorFlow's default).
ROWS_PER_RUN = 4

# What `TaskPreprocessor.examples` gives `kbert.data.task_dataset`: a tuple
# of tensors to slice into examples (features first, then targets and
# weights: the arguments of `forward_batch`), how many there are, how many
# model rows they give (question windows), and whether they are ragged.
Examples = collections.namedtuple("Examples", ["tensors", "count", "output_count", "ragged"])


def make_examples(tensors, count, output_count=None, ragged=False):
    """`Examples`; `output_count` defaults to `count` (one model row per example)."""
    return Examples(tensors, count, count if output_count is None else output_count, ragged)


class TaskPreprocessor(PreprocessingLayer):
    """What a task does around its model: raw inputs in, answers out.

    A task preprocessor owns its task's settings (label set, windows,
    choices) and offers both directions:

    - **forward**: `examples` checks raw inputs as `fit` takes them, and
      `forward_batch` turns a batch of them into model inputs (a dict of
      `token_ids`, `segment_ids`, `padding_mask`) with targets and sample
      weights; `kbert.data.task_dataset` runs them in `tf.data`. Calling the
      preprocessor on a batch, `preprocessor(x, y)`, does the same eagerly;
    - **reverse**: `reverse(outputs)` turns the model's outputs into what
      the task answers (probabilities and labels, tags, spans), as named
      tensors;
    - **serving**: `serving_inputs`, `serve` and `serve_token_ids` are the
      functions `kbert.export` saves, so the exporter needs to know nothing
      of the task. They run the model on a request's rows (texts, windows,
      questions) a few of similar length at a time, each run padded to its
      longest row only (`run_by_length`), with the answers of full padding.

    This base class takes texts or text pairs (`(texts_a, texts_b)`) and
    packs them with its `kbert.TextPacker` (the packer); subclasses for
    other inputs override the forward methods.

    Args:
        packer: a `kbert.TextPacker`: tokenizer and `sequence_length`.
        text_pairs: whether the task reads text pairs; None until it sees
            its first texts (and recorded then, so an export knows its
            inputs).
    """

    default_batch_size = DEFAULT_BATCH_SIZE
    # Whether outputs do not depend on how much padding follows the text, so
    # batches are padded only to their longest example.
    pads_to_longest = True
    # Whether batches may be packed, several examples to a row (a model with
    # a packed forward pass: every task but embeddings), and whether the
    # targets are one per token (tagging), packed as the tokens are.
    packs_examples = False
    per_token_targets = False

    def __init__(self, packer, text_pairs=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(packer, dict):
            packer = keras.saving.deserialize_keras_object(packer)
        if not isinstance(packer, TextPacker):
            raise TypeError(f"`packer` must be a kbert.TextPacker, got {type(packer).__name__}.")
        self.packer = packer
        self.text_pairs = None if text_pairs is None else bool(text_pairs)

    @property
    def tokenizer(self):
        return self.packer.tokenizer

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    # --- Forward: raw inputs to model inputs ----------------------------------

    def examples(self, x, y=None, sample_weight=None):
        """Checks texts or text pairs (with targets and weights) and returns them as `Examples`."""
        segments, is_pair = split_segments(x)
        self.record_text_pairs(is_pair)
        segments = [as_text_array(s) for s in segments]
        lengths = {len(s) for s in segments}
        if len(lengths) != 1:
            raise ValueError(f"The texts of a pair must be as many, got {sorted(lengths)}.")
        count = lengths.pop()
        features = tuple(segments) if is_pair else segments[0]
        parts = [features]
        if y is not None:
            y = self.check_targets(y)
            if len(y) != count:
                raise ValueError(f"Got {count} texts but {len(y)} labels.")
            parts.append(y)
        if sample_weight is not None:
            parts.append(check_sample_weight(sample_weight, count, "texts"))
        return make_examples(tuple(parts), count)

    def check_targets(self, y):
        """Checks targets (an array or a list); returns them as the model's loss takes them."""
        return np.asarray(y)

    def batch_dataset(self, dataset, batch_size):
        """A user's `tf.data.Dataset` of raw examples, batched (unless it is batched already)."""
        spec = dataset.element_spec
        features = spec[0] if isinstance(spec, tuple) and not is_pair_spec(spec) else spec
        self.record_text_pairs(is_pair_spec(features))
        first = split_segments(features)[0][0]
        if first.shape.rank == 0:
            dataset = dataset.batch(batch_size)
        if is_pair_spec(dataset.element_spec):
            # tf.data passes a tuple element as separate arguments; keep the pair.
            dataset = dataset.map(lambda a, b: ((a, b),))
        return dataset

    def example_lengths(self, features, *rest):
        """A length of each example of a batch to group batches by (bytes of text)."""
        segments, _ = split_segments(features)
        return tf.add_n([tf.strings.length(s) for s in segments])

    def forward_batch(self, features, *rest):
        """A batch of raw examples (and targets, weights) to model inputs (and the rest)."""
        inputs = self.packer(features)
        return (inputs, *rest) if rest else inputs

    def record_text_pairs(self, is_pair):
        """Records whether the model reads pairs, from the first texts; later texts of the other kind are refused."""
        if self.text_pairs is None:
            self.text_pairs = bool(is_pair)
        elif bool(is_pair) != self.text_pairs:
            raise ValueError("This model reads text pairs, (texts_a, texts_b); got single texts." if self.text_pairs
                             else "This model reads single texts; got text pairs. Its answers to pairs would mean "
                                  "nothing: train a model on pairs for them.")

    def call(self, x, y=None, sample_weight=None):
        """The forward step on one batch: model inputs, or `(inputs, y[, sample_weight])`."""
        rest = []
        if y is not None:
            rest.append(self.check_targets(y))
        if sample_weight is not None:
            rest.append(np.asarray(sample_weight, "float32"))
        return self.forward_batch(x, *rest)

    # --- Reverse: model outputs to answers ------------------------------------

    def reverse(self, outputs):
        """The model's outputs as the task's named answers (tensors)."""
        return outputs

    # --- Serving ----------------------------------------------------------------

    def serving_inputs(self, text_pairs=None):
        """`[(name, shape)]` of the string inputs `serving_default` takes."""
        text_pairs = self.text_pairs if text_pairs is None else text_pairs
        if text_pairs is None:
            raise ValueError(
                "This model has not seen any text yet, so it is not known whether it reads "
                "single texts or pairs; pass text_pairs=False or text_pairs=True."
            )
        return [("text", [None])] + ([("text_pair", [None])] if text_pairs else [])

    @property
    def token_ids_shape(self):
        """The shape of each model input that `from_token_ids` takes."""
        return [None, None]

    def serve(self, model, *texts):
        """`serving_default`: raw strings (as `serving_inputs` names them) to named answers."""
        return self.serve_token_ids(model, self.packer(tuple(texts) if len(texts) > 1 else texts[0]))

    def serve_token_ids(self, model, inputs):
        """`from_token_ids`: model inputs to named answers.

        The model runs on rows of similar length at a time, each run cut to
        its longest row (`run_by_length`): the answers equal those of the
        full padding, with less to compute.
        """
        return self.reverse(run_by_length(lambda rows: model_outputs(model, rows), inputs))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "packer": keras.saving.serialize_keras_object(self.packer),
                "text_pairs": self.text_pairs,
            }
        )
        return config


def as_text_array(texts):
    """A flat list or array of texts as a NumPy string array; names what is wrong."""
    if isinstance(texts, (str, bytes)):
        raise TypeError("Expected a list or array of texts, got a single string; wrap it in a list.")
    array = np.asarray(texts, dtype=object)
    if array.ndim != 1:
        raise ValueError(f"Texts must be a flat list, got an array of shape {array.shape}.")
    for i, text in enumerate(array):
        if not isinstance(text, (str, bytes)):
            raise TypeError(f"Text {i} is a {type(text).__name__}, not a string: {text!r}.")
    return array.astype(bytes) if array.size and isinstance(array[0], bytes) else array.astype(str)


def check_max_windows(max_windows):
    """`max_windows` as an int, or None: the windowed tasks' bound on a text at inference."""
    if max_windows is not None and (int(max_windows) != max_windows or max_windows < 1):
        raise ValueError(f"`max_windows` must be a positive integer or None, got {max_windows!r}.")
    return None if max_windows is None else int(max_windows)


def check_sample_weight(sample_weight, count, what):
    """Sample weights as float32: one per example, finite and not negative (one NaN would make every weight NaN)."""
    sample_weight = np.asarray(sample_weight, dtype="float32")
    if len(sample_weight) != count:
        raise ValueError(f"Got {count} {what} but {len(sample_weight)} sample weights.")
    bad = np.flatnonzero(~np.isfinite(sample_weight) | (sample_weight < 0))
    if bad.size:
        raise ValueError(f"Sample weights must be finite and not negative; {sample_weight[bad[0]]} at index "
                         f"{bad[0]} is not.")
    return sample_weight


def check_class_ids(y, num_classes, what="class ids", range_prefix=""):
    """Flat integer labels in `[0, num_classes)`, as int32; names the first bad one."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[-1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
        raise ValueError(
            f"Labels must be a flat list of integer {what}, got dtype {y.dtype} and shape {y.shape}."
        )
    bad = np.flatnonzero((y < 0) | (y >= num_classes))
    if bad.size:
        raise ValueError(
            f"Labels must be {range_prefix}in [0, {num_classes}); label {y[bad[0]]} at index "
            f"{bad[0]} is not ({bad.size} such labels in all)."
        )
    return y.astype("int32")


def run_by_length(call, inputs, output_names=None, per_token=False, rows_per_run=ROWS_PER_RUN):
    """`call(inputs)`, computed on runs of rows of similar length, each cut to its longest row.

    A row's length is the position after its last real token (its last 1 in
    `padding_mask`; the whole width for a row without one). Rows are sorted
    by length and taken `rows_per_run` at a time, each run cut to its own
    longest row, so one long text pads no other; a request of one row is
    one run. Results come back in the rows' order and equal `call(inputs)`
    wherever the model's outputs do not depend on padding (everywhere but
    on the padding positions themselves).

    Args:
        call: model inputs of some rows -> a float32 tensor (or, with
            `output_names`, a dict of them), one row per input row.
        inputs: the dict of `token_ids`, `segment_ids` and `padding_mask`,
            `(rows, length)`, or `(rows, choices, length)` (a row's length
            is then its longest choice's).
        output_names: the keys of `call`'s dict; None when it returns one
            tensor.
        per_token: whether the outputs have a length axis (axis 1), which
            comes back zero-padded to the inputs' length.
        rows_per_run: rows given to `call` at once.

    Returns:
        What `call(inputs)` returns, rows in the inputs' order.
    """
    mask = inputs["padding_mask"]
    width = tf.shape(mask)[-1]
    rows = tf.shape(mask)[0]
    ends = tf.cast(tf.not_equal(mask, 0), tf.int32) * tf.range(1, width + 1)
    lengths = tf.reduce_max(ends, axis=list(range(1, mask.shape.rank)))
    lengths = tf.where(lengths > 0, lengths, width)
    order = tf.argsort(lengths, stable=True)
    sorted_lengths = tf.gather(lengths, order)
    names = [None] if output_names is None else list(output_names)

    def run(index, results):
        start = index * rows_per_run
        chosen = order[start : start + rows_per_run]
        # At least 1 where it can: an empty request still runs, on zero rows.
        longest = tf.minimum(tf.maximum(tf.reduce_max(sorted_lengths[start : start + rows_per_run]), 1), width)
        outputs = call({name: tf.gather(value, chosen)[..., :longest] for name, value in inputs.items()})
        outputs = [outputs] if output_names is None else [outputs[name] for name in names]
        if per_token:
            outputs = [
                tf.pad(value, [[0, 0], [0, width - longest]] + [[0, 0]] * (value.shape.rank - 2))
                for value in outputs
            ]
        return index + 1, [result.write(index, value) for result, value in zip(results, outputs)]

    # One run at least: an empty request gets outputs of the right shape.
    runs = tf.maximum((rows + rows_per_run - 1) // rows_per_run, 1)
    # Eagerly, runs have concrete shapes that differ (fewer rows in the
    # last); in a graph, inferring the element shape keeps the static one.
    results = [tf.TensorArray(tf.float32, size=runs, infer_shape=not tf.executing_eagerly()) for _ in names]
    _, results = tf.while_loop(lambda index, _: index < runs, run, (tf.constant(0), results))
    # Back from length order to the rows' order.
    restore = tf.math.invert_permutation(order)
    outputs = [tf.gather(result.concat(), restore) for result in results]
    return outputs[0] if output_names is None else dict(zip(names, outputs))


def probabilities(logits):
    return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)


def is_pair_spec(spec):
    """True for a `(texts_a, texts_b)` element spec of two string tensors."""
    return (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec)
    )
