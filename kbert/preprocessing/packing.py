"""Packed batches: several examples share a row of tokens, so that a step computes little padding.

A batch of model inputs, each example padded to the batch's width, becomes
fewer rows of `row_width` tokens, the examples placed best-fit, longest
first. Each example keeps its own tokens and segment ids; four inputs say
where it is:

- `padding_mask` `(rows, width)`: 1 on tokens, 0 on padding, as before;
- `example_ids` `(rows, width)`: which example of its row a token belongs
  to, 1, 2, ... in the row (0 on padding): attention stays within an
  example (`kbert.models.encoder.packed_attention_mask`);
- `position_ids` `(rows, width)`: the token's position in its own example,
  from 0 at its `[CLS]`;
- `cls_positions` `(examples,)`: where each example's `[CLS]` is in the
  rows flattened (`row * width + column`), in the examples' order, so that
  targets and weights keep theirs. Keras counts a batch's examples (the
  weight of its loss in an epoch's mean) along the first input in the
  order of their names: this one.

A task model given these inputs runs its packed forward pass
(`kbert.models.task_model.TaskModel`), one output per example as unpacked:
losses, metrics and sample weights mean what they mean unpacked.
"""

import numpy as np
import tensorflow as tf

from kbert.backend import COMPILES_EACH_SHAPE

# Rows are as wide as a batch's tokens need, rounded up to a multiple of
# this (as unpacked batches are: `kbert.data.task_dataset`), or on JAX to a
# power of two.
ROW_WIDTH_MULTIPLE = 8


def place_examples(lengths, width):
    """Best-fit decreasing: `(rows, offsets, row_count)`, the row of each example and its first column.

    The longest example goes first, each into the row whose free room it
    fills best, in rows of `width` tokens; a longer example is refused.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and lengths.max() > width:
        raise ValueError(f"An example of {lengths.max()} tokens does not fit a row of {width}.")
    rows = np.zeros(lengths.size, np.int64)
    offsets = np.zeros(lengths.size, np.int64)
    room = []  # free tokens left in each row
    for example in np.argsort(-lengths, kind="stable"):
        length = lengths[example]
        fitting = [(free, row) for row, free in enumerate(room) if free >= length]
        if fitting:
            _, row = min(fitting)
        else:
            room.append(width)
            row = len(room) - 1
        rows[example], offsets[example] = row, width - room[row]
        room[row] -= length
    return rows, offsets, len(room)


def pack_arrays(token_ids, segment_ids, padding_mask, max_width, per_token=(),
                compiles_each_shape=COMPILES_EACH_SHAPE):
    """The packed batch (NumPy arrays, see the module) of one padded batch, rows at most `max_width` long.

    Rows are as wide as all the batch's tokens would need in one row
    (`row_width`), up to `max_width` (the preprocessor's `sequence_length`):
    a batch of a few short texts is not spread over a wide row. On a
    backend that compiles its step for each shape (JAX), the number of rows
    is rounded up to a power of two with empty rows, as the width is, so
    that a run compiles a handful of steps.

    `per_token` arrays, `(examples, width)` as the token ids (a tagger's
    labels and weights), are packed as the tokens are, with 0 on padding;
    they come back as the list `packed["per_token"]`.
    """
    lengths = np.asarray(padding_mask).astype(bool).sum(axis=1)
    width = max(min(max_width, row_width(lengths.sum(), compiles_each_shape)), int(lengths.max(initial=1)))
    rows, offsets, row_count = place_examples(lengths, width)
    if compiles_each_shape:
        row_count = 1 << max(row_count - 1, 0).bit_length()
    shape = (max(row_count, 1), width)
    packed = {name: np.zeros(shape, np.int32) for name in ("token_ids", "segment_ids", "padding_mask",
                                                          "example_ids", "position_ids")}
    sources = {"token_ids": token_ids, "segment_ids": segment_ids}
    packed_per_token = [np.zeros(shape, np.asarray(array).dtype) for array in per_token]
    next_id = np.zeros(shape[0], np.int32)
    for example, (length, row, offset) in enumerate(zip(lengths, rows, offsets)):
        columns = slice(offset, offset + length)
        next_id[row] += 1
        for name, source in sources.items():
            packed[name][row, columns] = source[example, :length]
        for target, source in zip(packed_per_token, per_token):
            target[row, columns] = source[example, :length]
        packed["padding_mask"][row, columns] = 1
        packed["example_ids"][row, columns] = next_id[row]
        packed["position_ids"][row, columns] = np.arange(length)
    packed["cls_positions"] = (rows * width + offsets).astype(np.int32)
    packed["per_token"] = packed_per_token
    return packed


def row_width(tokens, compiles_each_shape=COMPILES_EACH_SHAPE):
    """`tokens` rounded up to `ROW_WIDTH_MULTIPLE`, or to a power of two (at least 8) where each shape compiles."""
    tokens = max(int(tokens), 1)
    if compiles_each_shape:
        return max(1 << (tokens - 1).bit_length(), ROW_WIDTH_MULTIPLE)
    return -(-tokens // ROW_WIDTH_MULTIPLE) * ROW_WIDTH_MULTIPLE


def pack_batch(features, *rest, max_width, per_token_targets=False):
    """A `tf.data` map function: a batch of model inputs (and its targets, weights) to a packed batch.

    The features must be token ids, segment ids and a padding mask whose
    tokens come first in each row (kbert's packers give that). Targets and
    weights pass as they are, one per example; with `per_token_targets`
    (a tagger's: one per token), they are packed as the tokens are.
    """
    names = ("token_ids", "segment_ids", "padding_mask", "example_ids", "position_ids", "cls_positions")
    packed_rest = rest if per_token_targets else ()

    def pack(token_ids, segment_ids, padding_mask, *per_token):
        packed = pack_arrays(token_ids, segment_ids, padding_mask, max_width, per_token)
        return [packed[name] for name in names] + packed["per_token"]

    values = tf.numpy_function(pack, [tf.cast(features[name], tf.int32) for name in names[:3]] + list(packed_rest),
                               [tf.int32] * len(names) + [value.dtype for value in packed_rest], stateful=False)
    packed = {}
    for name, value in zip(names, values):
        value.set_shape([None] if name == "cls_positions" else [None, None])
        packed[name] = value
    if per_token_targets:
        rest = tuple(values[len(names):])
        for value in rest:
            value.set_shape([None, None])
    return (packed, *rest) if rest else packed
