"""The question answerer's task preprocessor: questions and contexts to windows; logits to answers.

It holds the task's settings and runs its steps for `fit`, `answer` and
serving; the steps are in `question_windows` (windows),
`span_decoding` (answers) and `question_answerer_inputs` (the Python
input forms).
"""

import keras
import numpy as np
import tensorflow as tf

from kbert.backend.tensorflow_bridge import model_outputs
from kbert.preprocessing.question_answerer_inputs import (
    QAExamples,
    as_examples,
    is_records,
    keyword_examples,
)
from kbert.preprocessing.question_windows import QuestionWindows
from kbert.preprocessing.span_decoding import answer_dicts, decode_spans
from kbert.preprocessing.task_preprocessor import (
    MODEL_INPUTS,
    TaskPreprocessor,
    check_max_windows,
    make_examples,
    run_by_length,
)

# Besides what is defined here, the question answerer's Python inputs and
# answers, which its callers import from this module.
__all__ = [
    "QAExamples",
    "QuestionAnswererPreprocessor",
    "SERVED_ANSWERS",
    "SPAN_LOGITS",
    "answer_dicts",
    "as_examples",
    "is_records",
    "keyword_examples",
    "span_logits",
]

# Questions tokenized per call when counting the windows before training.
_COUNT_BATCH_SIZE = 512
# The model's outputs: a start and an end logit per token.
SPAN_LOGITS = ("start_logits", "end_logits")
# What `serving_default` returns of `decode`'s answers.
SERVED_ANSWERS = ("text", "start", "end", "score", "candidate_texts", "candidate_starts",
                  "candidate_ends", "candidate_scores", "candidate_counts")


@keras.saving.register_keras_serializable(package="kbert")
class QuestionAnswererPreprocessor(TaskPreprocessor):
    """Packs a question and its context into windows; decodes span logits into answers (SQuAD).

    **Windows.** The question and the context are packed as a pair,
    `[CLS] question [SEP] context [SEP]`. A question keeps its first
    `max_question_length` tokens. A context longer than the room left is cut
    into overlapping windows, the next starting `doc_stride` tokens after the
    previous one, until the last reaches the context's end, as BERT's
    reference `run_squad.py` does (a stride longer than a window's context
    part is cut to it, so no token is skipped). In training every window is
    kept; at inference (`predict`, `answer`, an export) a context gets at
    most `max_windows` windows, and only its characters those windows can
    span are tokenized, so a request's work is bounded whatever its size. A
    context that fits in them gets the answer it would get unbounded.
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
    holds (in characters, as Python counts them; for a context too long for
    `max_windows`, in the context as it was read). The score of "no answer"
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
        packer: a `kbert.TextPacker`; its tokenizer and its
            `sequence_length` (the window length) are used.
        doc_stride: tokens between the starts of consecutive windows.
        max_question_length: question tokens kept; the rest are cut.
        max_answer_length: the longest answer, in tokens.
        n_best: candidate answers kept per question.
        null_score_threshold: None to always answer, or a float to answer
            `""` when no answer scores that much better than the best span.
        max_windows: at inference, the most windows a context gets (64
            windows read 8,445 context tokens at the default stride and a
            `sequence_length` of 384); None reads every token,
            however long the context sent.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "sat", "the", "cat", "?", "."]
    >>> packer = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=12)
    >>> preprocessor = kbert.QuestionAnswererPreprocessor(packer, doc_stride=2, max_question_length=4)
    >>> windows = preprocessor.build_windows(["who sat?"], ["the cat sat ."])
    >>> windows["token_ids"].numpy().tolist()
    [[2, 5, 6, 9, 3, 7, 8, 6, 10, 3, 0, 0]]
    """

    # Windows keep the full `sequence_length`.
    pads_to_longest = False
    # Packed, each window is an example of its own; its span logits are its own tokens'.
    packs_examples = True

    def __init__(
        self,
        packer,
        doc_stride=128,
        max_question_length=64,
        max_answer_length=15,
        n_best=20,
        null_score_threshold=None,
        max_windows=64,
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
        self.max_windows = check_max_windows(max_windows)
        self._question_windows = QuestionWindows(
            self.tokenizer, sequence_length, self.doc_stride, self.max_question_length,
            max_windows=self.max_windows,
        )
        self._training_function = None

    # --- Windows (TensorFlow ops) -------------------------------------------

    def build_windows(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Packs questions and contexts into the model's windows, with TF ops.

        `QuestionWindows.build` (in `kbert.preprocessing.question_windows`)
        with this preprocessor's settings: 1-D batches of questions and
        contexts in (and, for targets, the answers' character offsets
        `[start, end)`, -1 for none); a dict of tensors out, one row per
        window: the model inputs, `example_index` (the window's question),
        each position's character offsets in its context and, with answers,
        `start_positions` and `end_positions`.
        """
        return self._question_windows.build(questions, contexts, answer_starts, answer_ends)

    # --- Decoding (TensorFlow ops) ------------------------------------------

    def decode(self, start_logits, end_logits, windows):
        """The best answers from the windows' logits, with TF ops.

        Args:
            start_logits, end_logits: `(windows, sequence_length)` logits.
            windows: the dict of `build_windows` (its `example_index`,
                `word_char_starts`, `word_char_ends` and `contexts`).

        Returns:
            A dict of tensors, one row per question: `text` (string),
            `start`, `end` (character offsets), `score`, and the `n_best`
            candidates, best first (`candidate_texts` and the like); see
            `kbert.preprocessing.span_decoding.decode_spans`.
        """
        return decode_spans(
            start_logits, end_logits, windows, self.max_answer_length, self.n_best, self.null_score_threshold
        )

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
                layout = self._question_windows.layout(questions, contexts, starts, ends)
                windows = self._question_windows.pack(layout)
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
                training_windows, input_signature=[texts, texts, offsets, offsets],
                autograph=False,  # no Python control flow on tensors; traces faster
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
                "max_windows": self.max_windows,
            }
        )
        return config


def span_logits(model, inputs):
    """The model's `start_logits` and `end_logits` on `inputs`, float32 in any dtype policy."""
    outputs = model_outputs(model, inputs)
    return {name: outputs[name] for name in SPAN_LOGITS}
