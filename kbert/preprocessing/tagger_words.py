"""A tagger's words: sentences as ragged batches, word pieces and windows, per-word weights and offsets.

The helpers of `kbert.TaggerPreprocessor` (and `kbert.Tagger`'s inputs),
each a function of words and tensors, without the preprocessor's state.
"""

import numpy as np
import tensorflow as tf


def characters_before(texts, *byte_offsets):
    """Character offsets of byte offsets into their texts (each ragged like them), int32.

    How many characters of the text start before each offset: the texts are
    split into characters once, then one search per text, linear in its
    length, for each tensor of offsets.
    """
    _, char_byte_starts = tf.strings.unicode_split_with_offsets(texts, "UTF-8")
    char_byte_starts = char_byte_starts.to_tensor(default_value=tf.int64.max)
    char_byte_starts = tf.pad(char_byte_starts, [[0, 0], [0, 1]], constant_values=tf.int64.max)

    def search(offsets):
        # A padding column on both sides keeps the search valid for empty batches.
        padded = tf.pad(offsets.to_tensor(), [[0, 0], [0, 1]])
        counts = tf.searchsorted(char_byte_starts, padded, side="left")[:, :-1]
        flat = tf.RaggedTensor.from_tensor(counts, lengths=offsets.row_lengths()).flat_values
        return tf.cast(flat, tf.int32)

    return [search(offsets) for offsets in byte_offsets]


def check_labels(labels):
    if isinstance(labels, (str, bytes)) or labels is None:
        raise TypeError(
            "`labels` must be a list of tag strings (e.g. kbert.data.CONLL2003_LABELS), "
            f"got {labels!r}."
        )
    labels = list(labels)
    for label in labels:
        if not isinstance(label, str) or not label:
            raise ValueError(f"Every label must be a non-empty string, got {label!r} in {labels}.")
    if len(labels) < 2:
        raise ValueError(f"A tagger needs at least 2 labels, got {labels}.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"Labels must be unique; {repeated} repeat in {labels}.")
    return labels


def word_pieces(tokenizer, words, max_pieces):
    """Token ids of each word `(words, (pieces))`, between 1 and `max_pieces` of them.

    A word that tokenizes to nothing becomes `[UNK]`, so it keeps a position
    and a tag; a longer word keeps its first `max_pieces` pieces.
    """
    pieces = tokenizer(words)
    empty = tf.equal(pieces.row_lengths(), 0)
    unknown = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], tf.constant(tokenizer.unk_token_id)),
        tf.cast(empty, tf.int64),
    )
    return tf.concat([pieces, unknown], axis=1)[:, :max_pieces]


def first_words_of_windows(piece_counts, sentence_splits, window_budget):
    """The index of the first word of every window, in order.

    Windows never split a word and never cross sentences: each window takes
    as many whole words as fit in `window_budget` pieces (every word has at
    most that many). The loop runs once per window of the longest sentence,
    over all sentences at once.
    """
    piece_ends = tf.math.cumsum(piece_counts)
    # One more entry, the total, so that a finished sentence's start indexes it.
    piece_starts = tf.concat([piece_ends - piece_counts, piece_ends[-1:]], 0)
    starts, limits = sentence_splits[:-1], sentence_splits[1:]

    def next_windows(start, window_starts):
        open_ = start < limits
        reach = tf.gather(piece_starts, start) + window_budget
        end = tf.searchsorted(
            piece_ends[tf.newaxis], reach[tf.newaxis], side="right", out_type=tf.int64
        )
        end = tf.minimum(end[0], limits)
        window_starts = tf.concat([window_starts, tf.boolean_mask(start, open_)], 0)
        return tf.where(open_, end, start), window_starts

    _, window_starts = tf.while_loop(
        lambda start, _: tf.reduce_any(start < limits),
        next_windows,
        (starts, tf.zeros([0], tf.int64)),
        shape_invariants=(starts.shape, tf.TensorShape([None])),
    )
    # In order of position: each pass of the loop added one window per sentence.
    is_start = tf.scatter_nd(
        window_starts[:, tf.newaxis],
        tf.ones_like(window_starts),
        tf.shape(piece_counts, out_type=tf.int64),
    )
    return tf.where(is_start > 0)[:, 0]


def as_sentences(x):
    """Checks a list of sentences (lists of word strings) and returns it as lists of str."""
    if isinstance(x, (str, bytes)):
        raise TypeError("Expected a list of sentences (lists of words), got a single string.")
    sentences = []
    for i, sentence in enumerate(x):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"Sentence {i} is a string, not a list of words: {sentence!r}. Split it into words "
                "first (e.g. text.split()), or wrap a single sentence's words in a list."
            )
        words = []
        for j, word in enumerate(sentence):
            if isinstance(word, bytes):
                word = word.decode("utf-8", errors="replace")
            if not isinstance(word, str):
                raise TypeError(
                    f"Word {j} of sentence {i} is a {type(word).__name__}, not a string: {word!r}."
                )
            words.append(word)
        sentences.append(words)
    return sentences


def as_ragged_words(x):
    """A ragged batch of words from sentences (lists of words) or a ragged tensor."""
    return x if isinstance(x, tf.RaggedTensor) else ragged_rows(as_sentences(x), tf.string)


def ragged_rows(rows, dtype):
    lengths = [len(row) for row in rows]
    flat = [value for row in rows for value in row]
    values = tf.constant(flat, dtype) if flat else tf.zeros([0], dtype)
    return tf.RaggedTensor.from_row_lengths(values, tf.constant(lengths, tf.int64))


def word_weights(sample_weight, lengths):
    """Per-word sample weights from none, one per sentence, or one per word."""
    if sample_weight is None:
        return [[1.0] * n for n in lengths]
    sample_weight = list(sample_weight)
    if len(sample_weight) != len(lengths):
        raise ValueError(f"Got {len(lengths)} sentences but {len(sample_weight)} sample weights.")
    weights = []
    for i, (weight, length) in enumerate(zip(sample_weight, lengths)):
        if np.ndim(weight) == 0:
            weights.append([float(weight)] * length)
        else:
            weight = [float(w) for w in weight]
            if len(weight) != length:
                raise ValueError(
                    f"Sentence {i} has {length} words but {len(weight)} sample weights."
                )
            weights.append(weight)
    return weights


def batched_sentences(dataset, batch_size):
    """A dataset of sentences (or tuples starting with them) as ragged batches."""
    spec = dataset.element_spec
    words_spec = spec[0] if isinstance(spec, tuple) else spec
    if isinstance(spec, dict) or not hasattr(words_spec, "shape") or words_spec.dtype != tf.string:
        raise TypeError(
            "The dataset must yield sentences (1-D string tensors of words), or (words, tags) "
            f"pairs; got elements of {spec}."
        )
    rank = words_spec.shape.rank
    if rank == 1:
        return dataset.ragged_batch(batch_size)
    if rank == 2 and isinstance(words_spec, tf.RaggedTensorSpec):
        return dataset
    raise ValueError(
        "The dataset must yield one sentence (a 1-D tensor of words) per element, or ragged "
        f"batches of them (`dataset.ragged_batch(n)`); got elements of {spec}."
    )


def as_ragged(values):
    if isinstance(values, tf.RaggedTensor):
        return values
    return tf.RaggedTensor.from_tensor(values)


def word_weights_in_graph(weights, words):
    """Per-word float weights (ragged like `words`) from none, one per sentence, or one per word."""
    if weights is None:
        return words.with_flat_values(tf.ones_like(words.flat_values, tf.float32))
    weights = tf.cast(weights, tf.float32)
    if isinstance(weights, tf.RaggedTensor):
        return weights
    if weights.shape.rank == 1:  # One weight per sentence.
        return words.with_flat_values(tf.gather(weights, words.value_rowids()))
    return tf.RaggedTensor.from_tensor(weights, lengths=words.row_lengths())
