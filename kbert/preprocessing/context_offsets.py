"""Where a context's tokens, words and answer lie in it: character offsets, with TensorFlow ops.

A question answerer's answers are cut from the original context, so each of
its tokens carries the characters it came from. TF-Text's tokenizers give
offsets in UTF-8 bytes; these helpers turn them into characters (code
points, as Python counts them), widen tokens to whole words, and find the
tokens an answer covers.
"""

import tensorflow as tf


def string_vector(texts, name):
    """`texts` as a 1-D string tensor; names what is wrong otherwise.

    Example:
    >>> string_vector(["the cat"], "contexts").shape.as_list()
    [1]
    """
    if not isinstance(texts, tf.Tensor):
        texts = tf.convert_to_tensor(texts, tf.string)
    if texts.dtype != tf.string:
        raise TypeError(f"`{name}` must be strings, got a tensor of dtype {texts.dtype.name}.")
    if texts.shape.rank != 1:
        raise ValueError(f"`{name}` must be a 1-D batch of strings, got shape {texts.shape}.")
    return texts


def valid_utf8(texts):
    """`texts` with invalid UTF-8 replaced by U+FFFD.

    The tokenizer's offsets index this text; answers are cut from it too.

    Example:
    >>> valid_utf8(tf.constant([b"a\\xff"])).numpy().tolist()
    [b'a\\xef\\xbf\\xbd']
    """
    return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def byte_to_char_offsets(texts, byte_starts, byte_ends):
    """Token offsets in UTF-8 bytes to offsets in characters (code points).

    Args:
        texts: a 1-D string tensor of valid UTF-8.
        byte_starts, byte_ends: ragged int64 tensors, a row per text: each
            token's bytes `[start, end)`.

    Returns:
        `(char_starts, char_ends)`, ragged as the byte offsets.

    Example:
    >>> ends = tf.ragged.constant([[5]], tf.int64)
    >>> [offsets.to_list() for offsets in byte_to_char_offsets(tf.constant(["café"]), ends - 5, ends)]
    [[[0]], [[4]]]
    """
    _, char_byte_starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8")
    # One sorted list of every character's start, rows shifted by their bytes
    # before them, so a single searchsorted serves the whole batch.
    row_bytes = tf.math.cumsum(tf.cast(tf.strings.length(texts), tf.int64), exclusive=True)
    all_chars = char_byte_starts.flat_values + tf.gather(row_bytes, char_byte_starts.value_rowids())
    token_rows = byte_starts.value_rowids()
    token_shift = tf.gather(row_bytes, token_rows)
    chars_before_row = tf.gather(char_byte_starts.row_starts(), token_rows)

    def search(positions, side):
        found = tf.searchsorted(all_chars[tf.newaxis], positions[tf.newaxis], side=side,
                                out_type=tf.int64)
        return found[0] - chars_before_row

    # A token starts at the character that starts at its first byte; it ends
    # after the characters that start before its end.
    starts = search(byte_starts.flat_values + token_shift, "right") - 1
    ends = search(byte_ends.flat_values + token_shift, "left")
    return byte_starts.with_flat_values(starts), byte_ends.with_flat_values(ends)


def word_offsets(token_ids, char_starts, char_ends, continues_word):
    """The character offsets of the word each token is a piece of.

    Args:
        token_ids: ragged token ids, a row per text.
        char_starts, char_ends: each token's characters `[start, end)`,
            ragged as `token_ids`.
        continues_word: a bool tensor over the vocabulary: which pieces
            continue a word ("##s").

    Returns:
        `(word_starts, word_ends)`, ragged as `token_ids`.

    Example:
    >>> ids = tf.ragged.constant([[5, 6, 5]], tf.int64)  # cat ##s cat
    >>> starts, ends = tf.ragged.constant([[0, 3, 5]], tf.int64), tf.ragged.constant([[3, 4, 8]], tf.int64)
    >>> [offsets.to_list() for offsets in word_offsets(ids, starts, ends, tf.constant([False] * 6 + [True]))]
    [[[0, 0, 5]], [[4, 4, 8]]]
    """
    flat_ids = token_ids.flat_values
    rows = token_ids.value_rowids()
    first_in_row = tf.range(tf.size(flat_ids, tf.int64)) == tf.gather(token_ids.row_starts(), rows)
    begins_word = first_in_row | tf.logical_not(tf.gather(continues_word, flat_ids))
    word = tf.math.cumsum(tf.cast(begins_word, tf.int64)) - 1
    num_words = tf.reduce_sum(tf.cast(begins_word, tf.int64))
    starts = tf.math.unsorted_segment_min(char_starts.flat_values, word, num_words)
    ends = tf.math.unsorted_segment_max(char_ends.flat_values, word, num_words)
    return (
        char_starts.with_flat_values(tf.gather(starts, word)),
        char_ends.with_flat_values(tf.gather(ends, word)),
    )


def answer_tokens(char_starts, char_ends, answer_starts, answer_ends):
    """The first and last context token of each answer (the tokens of its characters).

    Args:
        char_starts, char_ends: each context token's characters `[start,
            end)`, ragged, a row per context.
        answer_starts, answer_ends: each answer's characters `[start, end)`;
            -1 for a question without an answer.

    Returns:
        A dict of `answer_first_token`, `answer_last_token` (int64; the last
        is before the first where the answer covers no token) and
        `has_answer` (bool), one per context.

    Example:
    >>> starts, ends = tf.ragged.constant([[0, 4, 8]], tf.int64), tf.ragged.constant([[3, 7, 11]], tf.int64)
    >>> tokens = answer_tokens(starts, ends, tf.constant([4]), tf.constant([11]))  # "the cat sat": "cat sat"
    >>> tokens["answer_first_token"].numpy().tolist(), tokens["answer_last_token"].numpy().tolist()
    ([1], [2])
    """
    answer_starts = tf.cast(answer_starts, tf.int64)
    answer_ends = tf.cast(answer_ends, tf.int64)
    rows = char_starts.value_rowids()
    num_rows = char_starts.nrows()
    # Tokens are in text order: the first answer token is the first that ends
    # after the answer starts; the last is the last that starts before it ends.
    ended_before = tf.cast(char_ends.flat_values <= tf.gather(answer_starts, rows), tf.int64)
    started_before = tf.cast(char_starts.flat_values < tf.gather(answer_ends, rows), tf.int64)
    return {
        "answer_first_token": tf.math.unsorted_segment_sum(ended_before, rows, num_rows),
        "answer_last_token": tf.math.unsorted_segment_sum(started_before, rows, num_rows) - 1,
        "has_answer": answer_starts >= 0,
    }
