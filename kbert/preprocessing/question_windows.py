"""The forward pass of a question answerer: questions and contexts cut into the windows its model reads."""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.preprocessing.context_offsets import (
    answer_tokens,
    byte_to_char_offsets,
    string_vector,
    valid_utf8,
    word_offsets,
)


class QuestionWindows:
    """Packs each question with its context into windows of `sequence_length` tokens, with TF ops.

    A window is `[CLS] question [SEP] context [SEP]`. A question keeps its
    first `max_question_length` tokens. A context longer than the room left
    is cut into overlapping windows, the next starting `doc_stride` tokens
    after the previous one, until the last reaches the context's end, as
    BERT's reference `run_squad.py` does (a stride longer than a window's
    context part is cut to it, so no token is skipped). Each context
    position carries the characters of its token and of its whole word, so
    answers can be cut from the original context.

    Args:
        tokenizer: a kbert tokenizer (`kbert.Tokenizer` or
            `kbert.SentencePieceTokenizer`).
        sequence_length: the window length, in tokens.
        doc_stride: tokens between the starts of consecutive windows.
        max_question_length: question tokens kept; the rest are cut.
        max_windows: with no answers given (inference), the most windows a
            context gets; its tokens past them are not read, and its
            characters past what they can span are not tokenized (see
            `BaseTokenizer.bound_texts`). None reads every token.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "sat", "the", "cat", "?", "."]
    >>> question_windows = QuestionWindows(kbert.Tokenizer(vocab), 10, doc_stride=2, max_question_length=3)
    >>> windows = question_windows.build(["who sat?"], ["the cat sat ."])
    >>> windows["token_ids"].numpy().tolist()
    [[2, 5, 6, 9, 3, 7, 8, 6, 10, 3]]
    """

    def __init__(self, tokenizer, sequence_length, doc_stride, max_question_length, max_windows=None):
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.doc_stride = int(doc_stride)
        self.max_question_length = int(max_question_length)
        self.max_windows = None if max_windows is None else int(max_windows)
        # Pieces that continue a word ("##s"): answers are widened to whole words.
        self.continues_word = np.zeros(tokenizer.vocabulary_size(), bool)
        self.continues_word[tokenizer.continuation_ids()] = True

    def build(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Packs questions and contexts into windows.

        Args:
            questions, contexts: 1-D string tensors (or lists) of equal length.
            answer_starts, answer_ends: optional int tensors of the answers'
                character offsets `[start, end)` in the contexts; -1 for a
                question without an answer.

        Returns:
            A dict of tensors, one row per window:

            - `token_ids`, `segment_ids`, `padding_mask`: model inputs,
              `(windows, sequence_length)` int32;
            - `example_index`: the question each window belongs to;
            - `token_char_starts`, `token_char_ends`: each position's
              character offsets `[start, end)` in its context, -1 outside the
              context part of the window;
            - `word_char_starts`, `word_char_ends`: the same for the whole
              word each position's token is a piece of (words as the
              tokenizer splits them: punctuation marks and CJK characters
              are words of their own);
            - with answers, `start_positions` and `end_positions`: the answer's
              first and last token in the window, 0 (`[CLS]`) for a window
              that does not hold it all;
            - `contexts`: the contexts, as the offsets index them (invalid
              UTF-8 replaced by U+FFFD), one per question.
        """
        return self.pack(self.layout(questions, contexts, answer_starts, answer_ends))

    def layout(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Tokens, character offsets and window counts of each question, before packing."""
        questions = valid_utf8(string_vector(questions, "questions"))
        contexts = valid_utf8(string_vector(contexts, "contexts"))
        tf.debugging.assert_equal(
            tf.shape(questions), tf.shape(contexts), message="Give one context per question."
        )
        tokenizer = self.tokenizer
        # A question is cut before it is tokenized, whatever its size.
        question_ids = tokenizer(tokenizer.cut_texts(questions, self.max_question_length))
        question_ids = question_ids[:, : self.max_question_length]
        # At inference, a context is read as far as `max_windows` windows
        # reach. (Training keeps every window: its answers' character
        # offsets index the context as given.)
        bounded = self.max_windows is not None and answer_starts is None
        if bounded:
            contexts = tokenizer.bound_texts(contexts, self.context_token_budget())
        context_ids, byte_starts, byte_ends = tokenizer.tokenize_with_offsets(contexts)
        char_starts, char_ends = byte_to_char_offsets(contexts, byte_starts, byte_ends)
        word_starts, word_ends = word_offsets(
            context_ids, char_starts, char_ends, tf.constant(self.continues_word)
        )

        question_lengths = question_ids.row_lengths()
        context_lengths = context_ids.row_lengths()
        room = self.sequence_length - 3 - question_lengths
        # As run_squad.py: windows start every `doc_stride` tokens (at most a
        # window's worth, so no token is skipped) until one reaches the end of
        # the context; an empty context still gets one.
        stride = tf.minimum(tf.constant(self.doc_stride, tf.int64), room)
        window_counts = tf.where(
            context_lengths <= room,
            tf.ones_like(context_lengths),
            (context_lengths - room + stride - 1) // stride + 1,
        )
        if bounded:
            window_counts = tf.minimum(window_counts, self.max_windows)
        layout = {
            "contexts": contexts,
            "question_ids": question_ids,
            "context_ids": context_ids,
            "char_starts": char_starts,
            "char_ends": char_ends,
            "word_starts": word_starts,
            "word_ends": word_ends,
            "room": room,
            "stride": stride,
            "window_counts": window_counts,
        }
        if answer_starts is not None:
            layout.update(answer_tokens(char_starts, char_ends, answer_starts, answer_ends))
        return layout

    def context_token_budget(self):
        """The most context tokens `max_windows` windows can hold: a window's room, then a stride each."""
        return (self.sequence_length - 3) + (self.max_windows - 1) * self.doc_stride

    def pack(self, layout):
        """Packs a `layout` into windows: the dict `build` returns."""
        tokenizer = self.tokenizer
        length = self.sequence_length
        context_ids = layout["context_ids"]
        num_examples = context_ids.nrows()
        example_index = tf.repeat(tf.range(num_examples), layout["window_counts"])
        window_number = tf.ragged.range(layout["window_counts"]).flat_values
        window_start = window_number * tf.gather(layout["stride"], example_index)
        window_length = tf.minimum(
            tf.gather(layout["room"], example_index),
            tf.gather(context_ids.row_lengths(), example_index) - window_start,
        )
        first_token = tf.gather(context_ids.row_starts(), example_index) + window_start
        token_indices = tf.ragged.range(first_token, first_token + window_length)
        window_ids = tf.gather(context_ids.flat_values, token_indices)
        question_ids = tf.gather(layout["question_ids"], example_index)
        packed, segment_ids = tf_text.combine_segments(
            [question_ids, window_ids],
            start_of_sequence_id=tokenizer.cls_token_id,
            end_of_segment_id=tokenizer.sep_token_id,
        )
        token_ids, padding_mask = tf_text.pad_model_inputs(packed, length, tokenizer.pad_token_id)
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, length, 0)

        # Where the context starts in each window: after [CLS] question [SEP].
        context_offset = tf.gather(layout["question_ids"].row_lengths(), example_index) + 2
        in_window = tf.range(length, dtype=tf.int64)[tf.newaxis] - context_offset[:, tf.newaxis]
        is_context = (in_window >= 0) & (in_window < window_length[:, tf.newaxis])

        def per_position(flat_values):
            # A trailing -1 keeps the gather in range when no context has a token.
            padded = tf.concat([flat_values, [-1]], axis=0)
            index = tf.clip_by_value(
                first_token[:, tf.newaxis] + in_window, 0, tf.size(flat_values, tf.int64)
            )
            return tf.cast(tf.where(is_context, tf.gather(padded, index), -1), tf.int32)

        windows = {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
            "example_index": tf.cast(example_index, tf.int32),
            "token_char_starts": per_position(layout["char_starts"].flat_values),
            "token_char_ends": per_position(layout["char_ends"].flat_values),
            "word_char_starts": per_position(layout["word_starts"].flat_values),
            "word_char_ends": per_position(layout["word_ends"].flat_values),
            "contexts": layout["contexts"],
        }
        if "answer_first_token" in layout:
            first = tf.gather(layout["answer_first_token"], example_index) - window_start
            last = tf.gather(layout["answer_last_token"], example_index) - window_start
            inside = (
                tf.gather(layout["has_answer"], example_index)
                & (first >= 0)
                & (last < window_length)
                & (first <= last)
            )
            windows["start_positions"] = tf.cast(tf.where(inside, first + context_offset, 0), tf.int32)
            windows["end_positions"] = tf.cast(tf.where(inside, last + context_offset, 0), tf.int32)
        return windows
