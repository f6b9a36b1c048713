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

import tensorflow as tf

from kbert.backend import COMPILES_EACH_SHAPE

# Rows are as wide as a batch's tokens need, rounded up to a multiple of
# this (as unpacked batches are: `kbert.data.task_dataset`), or on JAX to a
# power of two.
ROW_WIDTH_MULTIPLE = 8


def place_examples(lengths, width):
    """Best-fit decreasing: `(rows, offsets, row_count)`, the row of each example and its first column.

    The longest example goes first, each into the row whose free room it
    fills best (the first such row on a tie), in rows of `width` tokens; a
    row opens when none has room. TensorFlow ops, in the `tf.data` graph: a
    scan over the batch's examples, no Python per batch. Called eagerly, it
    gives NumPy arrays and an int, and refuses an example longer than
    `width`.
    """
    lengths = tf.cast(tf.convert_to_tensor(lengths), tf.int32)
    width = tf.cast(width, tf.int32)
    if tf.executing_eagerly() and tf.size(lengths) > 0 and int(tf.reduce_max(lengths)) > int(width):
        raise ValueError(f"An example of {int(tf.reduce_max(lengths))} tokens does not fit a row of {int(width)}.")
    count = tf.size(lengths)
    order = tf.argsort(-lengths, stable=True)

    def place(state, example):
        room, _, _ = state
        length = lengths[example]
        # Unopened rows have all `width` free: one is taken only where no open row fits.
        fitting = tf.where(room >= length, room, width + 1)
        row = tf.cast(tf.argmin(fitting), tf.int32)
        offset = width - room[row]
        return tf.tensor_scatter_nd_sub(room, [[row]], [length]), row, offset

    room = tf.fill([count], width)
    _, rows, offsets = tf.scan(place, order, initializer=(room, tf.constant(0), tf.constant(0)))
    # Back to the examples' order.
    rows = tf.scatter_nd(order[:, None], rows, [count])
    offsets = tf.scatter_nd(order[:, None], offsets, [count])
    count = tf.reduce_max(tf.concat([rows, [-1]], 0)) + 1
    if tf.executing_eagerly():
        return rows.numpy(), offsets.numpy(), int(count)
    return rows, offsets, count


def pack_tensors(token_ids, segment_ids, padding_mask, max_width, per_token=(),
                 compiles_each_shape=COMPILES_EACH_SHAPE):
    """The packed batch (a dict of tensors, see the module) of one padded batch, rows at most `max_width` long.

    Rows are as wide as all the batch's tokens would need in one row
    (`row_width`), up to `max_width` (the preprocessor's `sequence_length`):
    a batch of a few short texts is not spread over a wide row. On a
    backend that compiles its step for each shape (JAX), the number of rows
    is rounded up to a power of two with empty rows, as the width is, so
    that a run compiles a handful of steps.

    `per_token` tensors, `(examples, width)` as the token ids (a tagger's
    labels and weights), are packed as the tokens are, with 0 on padding;
    they come back as the list `packed["per_token"]`.
    """
    mask = tf.cast(padding_mask, tf.bool)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    width = tf.maximum(tf.minimum(max_width, row_width(tf.reduce_sum(lengths), compiles_each_shape)),
                       tf.reduce_max(tf.concat([lengths, [1]], 0)))
    rows, offsets, row_count = place_examples(lengths, width)
    if compiles_each_shape:
        row_count = row_width(row_count, True, multiple=1)
    row_count = tf.maximum(row_count, 1)
    columns = tf.range(tf.shape(mask)[1])
    # Where each token goes in the rows flattened; its example's number in its row (1, 2, ...).
    targets = tf.boolean_mask((rows * width + offsets)[:, None] + columns[None, :], mask)[:, None]
    examples = tf.range(tf.size(lengths))
    earlier_in_row = (rows[None, :] == rows[:, None]) & (examples[None, :] < examples[:, None])
    example_ids = tf.reduce_sum(tf.cast(earlier_in_row, tf.int32), axis=1) + 1

    def scattered(values):
        values = tf.boolean_mask(values, mask)
        return tf.reshape(tf.scatter_nd(targets, values, [row_count * width]), [row_count, width])

    every_token = tf.ones_like(padding_mask, tf.int32)
    packed = {
        "token_ids": scattered(tf.cast(token_ids, tf.int32)),
        "segment_ids": scattered(tf.cast(segment_ids, tf.int32)),
        "padding_mask": scattered(every_token),
        "example_ids": scattered(every_token * example_ids[:, None]),
        "position_ids": scattered(every_token * columns[None, :]),
        "cls_positions": rows * width + offsets,
        "per_token": [scattered(values) for values in per_token],
    }
    return packed


def pack_arrays(token_ids, segment_ids, padding_mask, max_width, per_token=(),
                compiles_each_shape=COMPILES_EACH_SHAPE):
    """`pack_tensors` as NumPy arrays (eagerly)."""
    packed = pack_tensors(token_ids, segment_ids, padding_mask, max_width, per_token, compiles_each_shape)
    return {name: [v.numpy() for v in value] if name == "per_token" else value.numpy()
            for name, value in packed.items()}


def row_width(tokens, compiles_each_shape=COMPILES_EACH_SHAPE, multiple=ROW_WIDTH_MULTIPLE):
    """`tokens` rounded up to `multiple`, or to a power of two (at least `multiple`) where each shape compiles.

    Python ints give an int; tensors (in the `tf.data` graph) a tensor.
    """
    if not tf.is_tensor(tokens):
        tokens = max(int(tokens), 1)
        if compiles_each_shape:
            return max(1 << (tokens - 1).bit_length(), multiple)
        return -(-tokens // multiple) * multiple
    tokens = tf.maximum(tf.cast(tokens, tf.int32), 1)
    if compiles_each_shape:
        # The bit length of `tokens - 1`, as 2 ** ceil(log2(tokens)), exact for integers.
        bits = tf.reduce_sum(tf.cast(tf.bitwise.right_shift(tokens - 1, tf.range(31)) > 0, tf.int32))
        return tf.maximum(tf.bitwise.left_shift(1, bits), multiple)
    return (tokens + multiple - 1) // multiple * multiple


def pack_batch(features, *rest, max_width, per_token_targets=False):
    """A `tf.data` map function: a batch of model inputs (and its targets, weights) to a packed batch.

    The features must be token ids, segment ids and a padding mask whose
    tokens come first in each row (kbert's packers give that). Features of
    `(examples, choices, length)` (multiple choice) are packed one sequence
    per choice, row-major: choice `c` of example `i` is sequence `i *
    choices + c`. Targets and weights pass as they are, one per example;
    with `per_token_targets` (a tagger's: one per token), they are packed as
    the tokens are.
    """
    token_ids, segment_ids, padding_mask = (features[name] for name in ("token_ids", "segment_ids", "padding_mask"))
    if token_ids.shape.rank == 3:
        token_ids, segment_ids, padding_mask = (tf.reshape(value, [-1, tf.shape(value)[-1]])
                                                for value in (token_ids, segment_ids, padding_mask))
    packed = pack_tensors(token_ids, segment_ids, padding_mask, max_width, rest if per_token_targets else ())
    packed_rest = packed.pop("per_token")
    rest = tuple(packed_rest) if per_token_targets else rest
    return (packed, *rest) if rest else packed
