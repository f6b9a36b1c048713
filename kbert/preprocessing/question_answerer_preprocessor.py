"""The question answerer's task preprocessor: questions and contexts to windows; logits to answers."""

import collections

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.preprocessing.task_preprocessor import (
    MODEL_INPUTS,
    TaskPreprocessor,
    model_outputs,
    make_examples,
    run_by_length,
)

# Questions tokenized per call when counting the windows before training.
_COUNT_BATCH_SIZE = 512
# The model's outputs: a start and an end logit per token.
SPAN_LOGITS = ("start_logits", "end_logits")
# What `serving_default` returns of `decode`'s answers.
SERVED_ANSWERS = ("text", "start", "end", "score", "candidate_texts", "candidate_starts",
                  "candidate_ends", "candidate_scores", "candidate_counts")

# Questions with their contexts and, for training, one answer each: its first
# character and its text ("" for a question without an answer).
QAExamples = collections.namedtuple(
    "QAExamples", ["questions", "contexts", "answer_starts", "answer_texts"]
)


@keras.saving.register_keras_serializable(package="kbert")
class QuestionAnswererPreprocessor(TaskPreprocessor):
    """Packs a question and its context into windows; decodes span logits into answers (SQuAD).

    **Windows.** The question and the context are packed as a pair,
    `[CLS] question [SEP] context [SEP]`. A question keeps its first
    `max_question_length` tokens. A context longer than the room left is cut
    into overlapping windows, the next starting `doc_stride` tokens after the
    previous one, until the last reaches the context's end, as BERT's
    reference `run_squad.py` does (a stride longer than a window's context
    part is cut to it, so no token is skipped); every window is kept.
    Training targets are the answer's first and last token in each window; a
    window that does not hold the whole answer points both at `[CLS]`
    (position 0).

    **Answers.** For each question, over all its windows, the span with the
    highest `start_logit + end_logit` wins, among spans that lie inside the
    context part of one window, start at or before they end, and are at most
    `max_answer_length` tokens long. As the reference maps answers back to
    whole words, the span is widened to whole words (a word's pieces go
    together; punctuation marks and CJK characters are words of their own,
    as the tokenizer splits them), then mapped to the original context
    through the tokenizer's offsets, so `context[start:end] == text` always
    holds (in characters, as Python counts them). The score of "no answer"
    is the `[CLS]` score `start_logits[0] + end_logits[0]` (the lowest over
    the question's windows); with `null_score_threshold` set, a question is
    answered `""` when the no-answer score exceeds the best span's by more
    than the threshold (SQuAD v2.0). By default every question gets a span
    (SQuAD v1.1).

    Window building (`build_windows`) and span decoding (`decode`) are
    TensorFlow and TF-Text ops, so a serving graph takes raw question and
    context strings and returns answers.

    Raw examples for `fit` are the question records of
    `kbert.data.load_squad` (the first answer of each is the target), a
    `(questions, contexts)` tuple with a list of answers as `y`, or
    `QAExamples`. A `tf.data.Dataset` must hold windows already (model
    inputs and targets, see `build_windows`).

    Args:
        packer: a `kbert.Preprocessor`; its tokenizer and its
            `sequence_length` (the window length) are used.
        doc_stride: tokens between the starts of consecutive windows.
        max_question_length: question tokens kept; the rest are cut.
        max_answer_length: the longest answer, in tokens.
        n_best: candidate answers kept per question.
        null_score_threshold: None to always answer, or a float to answer
            `""` when no answer scores that much better than the best span.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "sat", "the", "cat", "?", "."]
    >>> packer = kbert.Preprocessor(kbert.Tokenizer(vocab), sequence_length=12)
    >>> preprocessor = kbert.QuestionAnswererPreprocessor(packer, doc_stride=2, max_question_length=4)
    >>> windows = preprocessor.build_windows(["who sat?"], ["the cat sat ."])
    >>> windows["token_ids"].numpy().tolist()
    [[2, 5, 6, 9, 3, 7, 8, 6, 10, 3, 0, 0]]
    """

    # Windows keep the full `sequence_length`.
    pads_to_longest = False

    def __init__(
        self,
        packer,
        doc_stride=128,
        max_question_length=64,
        max_answer_length=15,
        n_best=20,
        null_score_threshold=None,
        **kwargs,
    ):
        kwargs.pop("text_pairs", None)  # always question and context
        super().__init__(packer, text_pairs=True, **kwargs)
        sequence_length = self.sequence_length
        for name, value in [
            ("doc_stride", doc_stride),
            ("max_question_length", max_question_length),
            ("max_answer_length", max_answer_length),
            ("n_best", n_best),
        ]:
            if int(value) != value or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        # The fewest context tokens a window holds: [CLS], question, 2 x [SEP].
        context_room = sequence_length - 3 - int(max_question_length)
        if context_room < 1:
            raise ValueError(
                f"`max_question_length` {max_question_length} leaves no room for the context in "
                f"windows of `sequence_length` {sequence_length} ([CLS] and two [SEP] take 3); "
                f"use at most {sequence_length - 4}."
            )
        if null_score_threshold is not None:
            null_score_threshold = float(null_score_threshold)
        self.doc_stride = int(doc_stride)
        self.max_question_length = int(max_question_length)
        self.max_answer_length = int(max_answer_length)
        self.n_best = int(n_best)
        self.null_score_threshold = null_score_threshold
        # Pieces that continue a word ("##s"): answers are widened to whole words.
        self._continues_word = np.zeros(self.tokenizer.vocabulary_size(), bool)
        self._continues_word[self.tokenizer.continuation_ids()] = True
        self._training_function = None

    # --- Windows (TensorFlow ops) -------------------------------------------

    def build_windows(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Packs questions and contexts into the model's windows, with TF ops.

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
        layout = self._layout(questions, contexts, answer_starts, answer_ends)
        return self._pack_windows(layout)

    def _layout(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Tokens, character offsets and window counts of each question, before packing."""
        questions = _valid_utf8(_string_vector(questions, "questions"))
        contexts = _valid_utf8(_string_vector(contexts, "contexts"))
        tf.debugging.assert_equal(
            tf.shape(questions), tf.shape(contexts), message="Give one context per question."
        )
        tokenizer = self.tokenizer
        question_ids = tokenizer(questions)[:, : self.max_question_length]
        context_ids, byte_starts, byte_ends = tokenizer.tokenize_with_offsets(contexts)
        char_starts, char_ends = _byte_to_char_offsets(contexts, byte_starts, byte_ends)
        word_starts, word_ends = _word_offsets(
            context_ids, char_starts, char_ends, tf.constant(self._continues_word)
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
            layout.update(_answer_tokens(char_starts, char_ends, answer_starts, answer_ends))
        return layout

    def _pack_windows(self, layout):
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

    # --- Decoding (TensorFlow ops) ------------------------------------------

    def decode(self, start_logits, end_logits, windows):
        """The best answers from the windows' logits, with TF ops.

        Args:
            start_logits, end_logits: `(windows, sequence_length)` logits.
            windows: the dict of `build_windows` (its `example_index`,
                `word_char_starts`, `word_char_ends` and `contexts`).

        Returns:
            A dict of tensors, one row per question: `text` (string),
            `start`, `end` (character offsets, int32), `score` (float32),
            and the `n_best` candidates, best first, deduplicated:
            `candidate_texts`, `candidate_starts`, `candidate_ends`,
            `candidate_scores` (padded with "", 0, 0, -inf) and
            `candidate_counts`.
        """
        start_logits = tf.cast(start_logits, tf.float32)
        end_logits = tf.cast(end_logits, tf.float32)
        example_index = tf.cast(windows["example_index"], tf.int64)
        # Spans are chosen over tokens and widened to whole words, as BERT's
        # reference maps them back to whole words of the original text.
        char_starts = tf.cast(windows["word_char_starts"], tf.int32)
        char_ends = tf.cast(windows["word_char_ends"], tf.int32)
        contexts = windows["contexts"]
        num_examples = tf.size(contexts, tf.int64)
        length = tf.shape(start_logits)[1]
        span = self.max_answer_length
        is_context = char_starts >= 0
        minus_inf = tf.constant(-np.inf, tf.float32)

        # score[w, i, j]: a span from token i to token i + j of window w.
        starts = tf.where(is_context, start_logits, minus_inf)
        ends = tf.pad(tf.where(is_context, end_logits, minus_inf), [[0, 0], [0, span - 1]],
                      constant_values=-np.inf)
        band = tf.stack([ends[:, j : j + length] for j in range(span)], axis=-1)
        scores = starts[:, :, tf.newaxis] + band
        # Every allowed span competes: several token spans can widen to the
        # same words, so a per-window top k could miss distinct answers.
        allowed = tf.where(scores > minus_inf)  # (window, first token, length - 1)
        window, first_token = allowed[:, 0], allowed[:, 1]
        last_token = first_token + allowed[:, 2]
        candidates = {
            "example": tf.gather(example_index, window),
            "start": tf.cast(tf.gather_nd(char_starts, tf.stack([window, first_token], axis=1)), tf.int64),
            "end": tf.cast(tf.gather_nd(char_ends, tf.stack([window, last_token], axis=1)), tf.int64),
            "score": tf.gather_nd(scores, allowed),
        }
        candidates = _best_distinct_spans(candidates, num_examples, self.n_best)

        null_scores = tf.math.unsorted_segment_min(
            start_logits[:, 0] + end_logits[:, 0], example_index, num_examples
        )
        has_span = candidates["counts"] > 0
        best_score = candidates["score"][:, 0]
        answer_null = tf.logical_not(has_span)
        if self.null_score_threshold is not None:
            answer_null |= null_scores - best_score > self.null_score_threshold
        start = tf.where(answer_null, 0, candidates["start"][:, 0])
        end = tf.where(answer_null, 0, candidates["end"][:, 0])
        tiled_contexts = tf.broadcast_to(contexts[:, tf.newaxis], tf.shape(candidates["start"]))
        candidate_texts = tf.strings.substr(
            tiled_contexts, candidates["start"], candidates["end"] - candidates["start"], unit="UTF8_CHAR"
        )
        return {
            "text": tf.strings.substr(contexts, start, end - start, unit="UTF8_CHAR"),
            "start": start,
            "end": end,
            "score": tf.where(answer_null, null_scores, best_score),
            "null_score": null_scores,
            "candidate_texts": candidate_texts,
            "candidate_starts": candidates["start"],
            "candidate_ends": candidates["end"],
            "candidate_scores": candidates["score"],
            "candidate_counts": tf.cast(candidates["counts"], tf.int32),
        }


    # --- Forward: question records to windows in tf.data ---------------------------

    def examples(self, x, y=None, sample_weight=None):
        """Questions, contexts and answers as `Examples`; `output_count` is their windows."""
        if sample_weight is not None:
            raise ValueError("A QuestionAnswerer takes no `sample_weight`.")
        qa_examples = as_examples(x, y, with_answers=True)
        answer_starts, answer_ends = self.check_answers(qa_examples)
        window_total = int(sum(self.window_counts(qa_examples, answer_starts, answer_ends)))
        tensors = (
            np.asarray(qa_examples.questions, dtype=object).astype(str),
            np.asarray(qa_examples.contexts, dtype=object).astype(str),
            np.asarray(answer_starts, "int64"),
            np.asarray(answer_ends, "int64"),
        )
        return make_examples(tensors, len(qa_examples.questions), output_count=window_total)

    def batch_dataset(self, dataset, batch_size):
        raise TypeError(
            "A tf.data.Dataset for a QuestionAnswerer must hold windows (model inputs and "
            "targets, see `build_windows`); give questions as lists or records instead."
        )

    def forward_batch(self, questions, contexts, answer_starts, answer_ends):
        """A batch of questions with answers to `(windows, targets)`: more rows than questions."""
        features, targets, _, _ = self.training_windows(questions, contexts, answer_starts, answer_ends)
        return features, targets

    def call(self, x, y=None, sample_weight=None):
        """The forward step on questions: windows (a dict, see `build_windows`), or with answers
        `(model inputs, targets)`."""
        if y is None and not (is_records(x) and all("answers" in r for r in x)):
            qa_examples = as_examples(x, None, with_answers=False)
            return self.build_windows(qa_examples.questions, qa_examples.contexts)
        return self.forward_batch(*self.examples(x, y, sample_weight).tensors)

    def check_answers(self, examples):
        """Character `[start, end)` of each answer (-1 for none), checked against its context."""
        starts, ends = [], []
        for index, (context, start, text) in enumerate(
            zip(examples.contexts, examples.answer_starts, examples.answer_texts)
        ):
            if text == "":
                starts.append(-1)
                ends.append(-1)
                continue
            found = context[start : start + len(text)] if start is not None and start >= 0 else None
            if found != text:
                raise ValueError(
                    f"Answer {index} ({text!r:.60}) at character {start} does not match its "
                    f"context there ({found!r:.60})."
                )
            starts.append(start)
            ends.append(start + len(text))
        return starts, ends

    def training_windows(self, questions, contexts, answer_starts, answer_ends):
        """Windows with targets, windows per question, and whether each answer covers a token.

        One `tf.function` per model, traced once: `tf.data` maps call it, and
        so does the count of windows before training.
        """
        if self._training_function is None:
            def training_windows(questions, contexts, starts, ends):
                layout = self._layout(questions, contexts, starts, ends)
                windows = self._pack_windows(layout)
                features = {name: windows[name] for name in MODEL_INPUTS}
                targets = {
                    "start_logits": windows["start_positions"],
                    "end_logits": windows["end_positions"],
                }
                covered = layout["answer_first_token"] <= layout["answer_last_token"]
                covered |= tf.logical_not(layout["has_answer"])
                return features, targets, layout["window_counts"], covered

            texts, offsets = tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int64)
            self._training_function = tf.function(
                training_windows, input_signature=[texts, texts, offsets, offsets]
            )
        return self._training_function(questions, contexts, answer_starts, answer_ends)

    def window_counts(self, examples, answer_starts, answer_ends):
        """Windows per question; fails on an answer that covers no token."""
        counts = []
        for begin in range(0, len(examples.questions), _COUNT_BATCH_SIZE):
            end = begin + _COUNT_BATCH_SIZE
            _, _, window_counts, covered = self.training_windows(
                tf.constant(examples.questions[begin:end], tf.string),
                tf.constant(examples.contexts[begin:end], tf.string),
                tf.constant(answer_starts[begin:end], tf.int64),
                tf.constant(answer_ends[begin:end], tf.int64),
            )
            uncovered = np.flatnonzero(~covered.numpy())
            if uncovered.size:
                index = begin + int(uncovered[0])
                raise ValueError(
                    f"Answer {index} ({examples.answer_texts[index]!r:.60}) covers no token of its "
                    "context: it is only whitespace or characters the tokenizer drops."
                )
            counts.extend(window_counts.numpy().tolist())
        return counts


    # --- Reverse and serving ----------------------------------------------------------

    def reverse(self, outputs, windows):
        """The answers of the model's outputs on `windows` (see `decode`)."""
        return self.decode(outputs["start_logits"], outputs["end_logits"], windows)

    def answer_batch(self, model, questions, contexts):
        """Strings in, answers out: windows, the model, and `decode`, in TF ops."""
        windows = self.build_windows(questions, contexts)
        # Windows of similar length run together, each run cut to its
        # longest: `decode` reads context positions only, never padding.
        outputs = run_by_length(
            lambda rows: span_logits(model, rows), {name: windows[name] for name in MODEL_INPUTS},
            output_names=SPAN_LOGITS, per_token=True,
        )
        return self.reverse(outputs, windows)

    def window_logits(self, model, questions, contexts):
        """The model's float32 `start_logits` and `end_logits` of every window, and its question."""
        windows = self.build_windows(questions, contexts)
        logits = span_logits(model, {name: windows[name] for name in MODEL_INPUTS})
        return {**logits, "example_index": windows["example_index"]}

    def serving_inputs(self, text_pairs=None):
        if text_pairs:
            raise ValueError("`text_pairs` applies to classifiers and embedders.")
        return [("question", [None]), ("context", [None])]

    def serve(self, model, questions, contexts):
        answers = self.answer_batch(model, questions, contexts)
        return {name: answers[name] for name in SERVED_ANSWERS}

    def serve_token_ids(self, model, inputs):
        return span_logits(model, inputs)

    def get_config(self):
        config = super().get_config()
        del config["text_pairs"]
        config.update(
            {
                "doc_stride": self.doc_stride,
                "max_question_length": self.max_question_length,
                "max_answer_length": self.max_answer_length,
                "n_best": self.n_best,
                "null_score_threshold": self.null_score_threshold,
            }
        )
        return config


# --- Helpers: TensorFlow ----------------------------------------------------


def _string_vector(texts, name):
    if not isinstance(texts, tf.Tensor):
        texts = tf.convert_to_tensor(texts, tf.string)
    if texts.dtype != tf.string:
        raise TypeError(f"`{name}` must be strings, got a tensor of dtype {texts.dtype.name}.")
    if texts.shape.rank != 1:
        raise ValueError(f"`{name}` must be a 1-D batch of strings, got shape {texts.shape}.")
    return texts


def _valid_utf8(texts):
    # The tokenizer's offsets index the text with invalid UTF-8 replaced;
    # answers are cut from that same text.
    return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def _byte_to_char_offsets(texts, byte_starts, byte_ends):
    """Token offsets in UTF-8 bytes to offsets in characters (code points)."""
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


def _word_offsets(token_ids, char_starts, char_ends, continues_word):
    """The character offsets of the word each token is a piece of."""
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


def _answer_tokens(char_starts, char_ends, answer_starts, answer_ends):
    """The first and last context token of each answer (its characters' tokens)."""
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


def _best_distinct_spans(candidates, num_examples, n_best):
    """Each question's `n_best` best distinct character spans, padded to a dense batch.

    Overlapping windows find the same span twice; the better score is kept.
    """
    # One row per distinct (question, start, end), with its best score.
    keys = tf.stack([candidates[key] for key in ("example", "start", "end")], axis=1)
    distinct, index = tf.raw_ops.UniqueV2(x=keys, axis=tf.constant([0], tf.int64))
    candidates = {
        "example": distinct[:, 0],
        "start": tf.cast(distinct[:, 1], tf.int32),
        "end": tf.cast(distinct[:, 2], tf.int32),
        "score": tf.math.unsorted_segment_max(candidates["score"], index, tf.shape(distinct)[0]),
    }

    def reorder(order):
        return {name: tf.gather(value, order) for name, value in candidates.items()}

    # Best first within each question (stable sorts, least significant key first).
    candidates = reorder(tf.argsort(candidates["score"], direction="DESCENDING", stable=True))
    candidates = reorder(tf.argsort(candidates["example"], stable=True))

    def per_question(values, default):
        ragged = tf.RaggedTensor.from_value_rowids(values, candidates["example"], nrows=num_examples)
        return ragged[:, :n_best].to_tensor(default_value=default, shape=[None, n_best])

    result = {
        "start": per_question(candidates["start"], 0),
        "end": per_question(candidates["end"], 0),
        "score": per_question(candidates["score"], -np.inf),
    }
    result["counts"] = tf.minimum(
        tf.math.bincount(tf.cast(candidates["example"], tf.int32), minlength=tf.cast(num_examples, tf.int32),
                         dtype=tf.int64),
        n_best,
    )
    return result


# --- Helpers: Python inputs and outputs -------------------------------------


def is_records(x):
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(r, dict) for r in x)


def _check_texts(texts, name):
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"`{name}` must be a list of strings, got a single string; wrap it in a list.")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] is a {type(text).__name__}, not a string: {text!r:.60}.")
    return texts


def keyword_examples(questions, contexts, answer_starts, answer_texts):
    if questions is None or contexts is None:
        raise ValueError("Give both `questions` and `contexts`.")
    questions = _check_texts(questions, "questions")
    contexts = _check_texts(contexts, "contexts")
    if len(questions) != len(contexts):
        raise ValueError(f"Got {len(questions)} questions but {len(contexts)} contexts.")
    if (answer_starts is None) != (answer_texts is None):
        raise ValueError("Give both `answer_starts` and `answer_texts`, or neither.")
    if answer_starts is not None:
        answer_starts = [int(s) for s in answer_starts]
        answer_texts = _check_texts(answer_texts, "answer_texts")
        if not len(answer_starts) == len(answer_texts) == len(questions):
            raise ValueError(
                f"Got {len(questions)} questions, {len(answer_starts)} answer starts and "
                f"{len(answer_texts)} answer texts; give one of each per question."
            )
    return QAExamples(questions, contexts, answer_starts, answer_texts)


def _first_answer(answers, index):
    """`(start, text)` of the first answer in a dict or a list of dicts; (-1, "") for none."""
    if isinstance(answers, dict):
        answers = [answers]
    if not isinstance(answers, (list, tuple)):
        raise TypeError(
            f"Answer {index} must be a {{'text', 'answer_start'}} dict or a list of them, "
            f"got {answers!r:.60}."
        )
    if not answers:
        return -1, ""
    answer = answers[0]
    if not isinstance(answer, dict) or "text" not in answer or "answer_start" not in answer:
        raise TypeError(f"Answer {index} must have 'text' and 'answer_start', got {answer!r:.80}.")
    return int(answer["answer_start"]), answer["text"]


def as_examples(x, y, with_answers):
    """Questions, contexts and (for training) first answers from the accepted input forms."""
    if isinstance(x, QAExamples):
        examples = x
    elif is_records(x):
        if y is not None:
            raise ValueError("Question records carry their answers; give no `y`.")
        for i, record in enumerate(x):
            if "question" not in record or "context" not in record:
                raise TypeError(f"Record {i} has no 'question' or 'context': keys {sorted(record)}.")
        questions = _check_texts([r["question"] for r in x], "questions")
        contexts = _check_texts([r["context"] for r in x], "contexts")
        starts = texts = None
        if with_answers:
            if any("answers" not in r for r in x):
                index = next(i for i, r in enumerate(x) if "answers" not in r)
                raise TypeError(f"Record {index} has no 'answers' to train on.")
            starts, texts = zip(*[_first_answer(r["answers"], i) for i, r in enumerate(x)]) if x else ((), ())
        examples = QAExamples(questions, contexts, starts and list(starts), texts and list(texts))
    elif isinstance(x, (tuple, list)) and len(x) == 2 and not isinstance(x[0], (str, bytes, dict)):
        questions, contexts = _check_texts(x[0], "questions"), _check_texts(x[1], "contexts")
        if len(questions) != len(contexts):
            raise ValueError(f"Got {len(questions)} questions but {len(contexts)} contexts.")
        starts = texts = None
        if with_answers:
            if y is None:
                raise ValueError("Give the answers as `y`: one {'text', 'answer_start'} dict per question.")
            y = list(y)
            if len(y) != len(questions):
                raise ValueError(f"Got {len(questions)} questions but {len(y)} answers.")
            pairs = [_first_answer(answers, i) for i, answers in enumerate(y)]
            starts, texts = [p[0] for p in pairs], [p[1] for p in pairs]
        examples = QAExamples(questions, contexts, starts, texts)
    else:
        raise TypeError(
            "Give question records (as kbert.data.load_squad returns), a (questions, contexts) "
            f"tuple, or the `questions`/`contexts` keywords; got {type(x).__name__}."
        )
    if not examples.questions:
        raise ValueError("No questions given.")
    if with_answers and examples.answer_starts is None:
        raise ValueError("Training needs answers: give `answer_starts` and `answer_texts`.")
    return examples


def answer_dicts(batch, top_k):
    """The numpy results of `decode` as Python answer dicts."""
    values = {name: np.asarray(value) for name, value in batch.items()}
    answers = []
    for row in range(len(values["text"])):
        if top_k is None:
            answers.append(
                {
                    "text": values["text"][row].decode("utf-8"),
                    "start": int(values["start"][row]),
                    "end": int(values["end"][row]),
                    "score": float(values["score"][row]),
                }
            )
            continue
        count = min(int(values["candidate_counts"][row]), top_k)
        answers.append(
            [
                {
                    "text": values["candidate_texts"][row, i].decode("utf-8"),
                    "start": int(values["candidate_starts"][row, i]),
                    "end": int(values["candidate_ends"][row, i]),
                    "score": float(values["candidate_scores"][row, i]),
                }
                for i in range(count)
            ]
        )
    return answers


def span_logits(model, inputs):
    """The model's `start_logits` and `end_logits` on `inputs`, float32 in any dtype policy."""
    outputs = model_outputs(model, inputs)
    return {name: outputs[name] for name in SPAN_LOGITS}
