"""Extractive question answering: the span of a context that answers a question (SQuAD)."""

import keras
import numpy as np

from kbert.backend.model_inputs import is_token_ids
from kbert.backend.tensorflow_support import require_tensorflow
from kbert.metrics.squad import squad_scores
from kbert.models.encoder import tokens_by_example
from kbert.models.task_model import TaskModel, deprecated, encoder_and_preprocessor, output_head

# The logit of a position that is not a token (padding): far below any
# span's, and finite in float16.
NOT_A_TOKEN_LOGIT = -1e4


@keras.saving.register_keras_serializable(package="kbert")
class QuestionAnswerer(TaskModel):
    """Finds the span of a context that answers a question, as BERT does on SQuAD.

    The `kbert.QuestionAnswererPreprocessor` packs each question with its
    context into windows, `[CLS] question [SEP] context [SEP]`, and decodes
    the best span back to characters of the context; a dense layer on the
    encoder's `sequence_output` gives every token a start logit and an end
    logit (dict outputs `start_logits` and `end_logits`, shape `(windows,
    sequence)`).

    `fit` and `evaluate` take the question dicts of `kbert.data.load_squad`
    (the first answer of each is the target), a `(questions, contexts)`
    tuple with a list of answers as `y`, or the keywords `questions`,
    `contexts`, `answer_starts` and `answer_texts`. `answer` gives answers:
    `answer(question=..., context=...)` one `{"text", "start", "end",
    "score"}`, `answer(records)` (or `questions=[...], contexts=[...]`) a
    list of them. `predict` keeps Keras' contract and returns the logits:
    per question, a dict of its windows' `start_logits` and `end_logits`.
    `evaluate_report` gives SQuAD's exact match and F1.

    The model is compiled with BERT's fine-tuning recipe (as `Classifier`):
    AdamW with warm-up and linear decay, and the mean of the start and end
    sparse categorical cross-entropies on logits.

    Args:
        encoder: a `kbert.Encoder`.
        preprocessor: a `kbert.QuestionAnswererPreprocessor`, or a
            `kbert.TextPacker` (wrapped into one with the settings below);
            its `sequence_length` is the window length.
        doc_stride: tokens between the starts of consecutive windows.
        max_question_length: question tokens kept; the rest are cut.
        max_answer_length: the longest answer, in tokens.
        n_best: candidate answers kept per question (`answer(top_k=...)`).
        null_score_threshold: None to always answer, or a float to answer
            `""` when no answer scores that much better than the best span.

    Example:
    >>> vocab = kbert.learn_vocabulary(["who sat on the mat ? the cat sat on the mat ."] * 5,
    ...                                vocabulary_size=40, verbose=False)
    >>> qa = kbert.question_answerer("tiny", vocabulary=vocab, sequence_length=32,
    ...                              doc_stride=8, max_question_length=8)
    >>> answer = qa.answer(question="who sat on the mat?", context="the cat sat on the mat.")
    >>> sorted(answer)
    ['end', 'score', 'start', 'text']
    >>> "the cat sat on the mat."[answer["start"]:answer["end"]] == answer["text"]
    True
    >>> qa.predict([{"question": "who sat?", "context": "the cat sat."}])[0]["start_logits"].shape
    (1, 32)
    """

    uses_pooler = False  # outputs come from the sequence output

    def __init__(self, encoder, preprocessor=None, doc_stride=None, max_question_length=None,
                 max_answer_length=None, n_best=None, null_score_threshold=None, **kwargs):
        kwargs.pop("text_pairs", None)  # saved by earlier versions
        encoder, preprocessor = encoder_and_preprocessor(
            encoder, preprocessor, _question_answerer_preprocessor,
            doc_stride=doc_stride, max_question_length=max_question_length,
            max_answer_length=max_answer_length, n_best=n_best,
            null_score_threshold=null_score_threshold,
        )

        # === Layers ===
        self.encoder = encoder
        self.span_logits = output_head(encoder, 2, "span_logits")

        # === Functional model ===
        inputs = encoder.input
        logits = self.span_logits(encoder(inputs)["sequence_output"])
        outputs = _span_outputs(logits, keras.ops.greater(inputs["padding_mask"], 0))
        super().__init__(inputs=inputs, outputs=outputs, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self._traced_functions = {}
        self.compile()

    def packed_call(self, inputs, training=None):
        """Span logits `(windows, width)` for a packed batch: each window's own tokens, as alone."""
        sequence = self.encoder.packed_sequence_output(inputs, training=training)
        logits, is_token = tokens_by_example(self.span_logits(sequence), inputs)
        return _span_outputs(logits, is_token)

    def default_loss(self):
        return {
            name: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            for name in ("start_logits", "end_logits")
        }

    def default_metrics(self, compile_kwargs):
        # The loss is the mean of the start and end cross-entropies.
        compile_kwargs.setdefault("loss_weights", {"start_logits": 0.5, "end_logits": 0.5})
        return {
            name: [keras.metrics.SparseCategoricalAccuracy("accuracy")]
            for name in ("start_logits", "end_logits")
        }

    def fit(self, x=None, y=None, batch_size=None, epochs=1, *, questions=None, contexts=None,
            answer_starts=None, answer_texts=None, **kwargs):
        """Fine-tunes on questions with their contexts and answers.

        The training data is the records of `kbert.data.load_squad` (the
        first answer of each question is its target), a `(questions,
        contexts)` tuple with answers as `y` (each a `{"text",
        "answer_start"}` dict, or a list of them), or the parallel lists
        `questions`, `contexts`, `answer_starts`, `answer_texts` as keywords
        (an answer text `""` marks a question without an answer). A
        `tf.data.Dataset` of windows (model inputs and targets) also works.
        `batch_size` counts windows. Other arguments are Keras' `fit`'s.
        """
        if questions is not None or contexts is not None:
            if x is not None or y is not None:
                raise ValueError("Give the training data either as `x`/`y` or as keywords, not both.")
            from kbert.preprocessing.question_answerer_preprocessor import keyword_examples

            x = keyword_examples(questions, contexts, answer_starts, answer_texts)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """The loss and start/end accuracies on windows; `evaluate_report` gives EM and F1."""
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def _validation_dataset(self, validation_data, batch_size):
        pair = isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3)
        # Two or three question records are not `(x, y[, weights])`.
        records = isinstance(validation_data, list) and all(
            isinstance(record, dict) and "question" in record for record in validation_data)
        if records or not (is_token_ids(validation_data) or pair and is_token_ids(validation_data[0])):
            require_tensorflow("Raw-text validation data")
            from kbert.preprocessing.question_answerer_preprocessor import QAExamples, is_records

            # Question records (or `QAExamples`) hold their answers: no separate targets.
            if isinstance(validation_data, QAExamples) or is_records(validation_data):
                validation_data = (validation_data, None)
        return super()._validation_dataset(validation_data, batch_size)

    def _traced(self, name):
        """The preprocessor's `name(model, questions, contexts)` as one `tf.function` per model."""
        tf = require_tensorflow("Answering questions")
        if name not in self._traced_functions:
            spec = tf.TensorSpec([None], tf.string)
            method = getattr(self._raw_input_preprocessor(), name)
            self._traced_functions[name] = tf.function(
                lambda questions, contexts: method(self, questions, contexts), input_signature=[spec, spec],
                autograph=False,  # no Python control flow on tensors; traces faster
            )
        return self._traced_functions[name]

    def _question_batches(self, x, batch_size, questions=None, contexts=None):
        """`(questions, contexts)` string tensors of each batch of questions."""
        tf = require_tensorflow("Answering questions")
        from kbert.preprocessing.question_answerer_preprocessor import as_examples, keyword_examples

        if questions is not None or contexts is not None:
            if x is not None:
                raise ValueError("Give the questions either as `x` or as keywords, not both.")
            qa_examples = keyword_examples(questions, contexts, None, None)
        else:
            qa_examples = as_examples(x, None, with_answers=False)
        batch_size = batch_size or self._raw_input_preprocessor().default_batch_size
        count = len(qa_examples.questions)
        return [
            (
                tf.constant(qa_examples.questions[begin : begin + batch_size], tf.string),
                tf.constant(qa_examples.contexts[begin : begin + batch_size], tf.string),
            )
            for begin in range(0, count, batch_size)
        ]

    def predict(self, x=None, batch_size=None, verbose="auto", *, questions=None, contexts=None,
                question=None, context=None, top_k=None):
        """The span logits of each question: a list with one dict per question.

        Each dict holds `start_logits` and `end_logits`, float32 arrays
        `(windows, sequence_length)` over the question's windows (see
        `kbert.QuestionAnswererPreprocessor`). `x` takes question records
        (dicts with `question` and `context`) or a `(questions, contexts)`
        tuple; `questions` and `contexts` may be given as keywords. For
        answers, use `answer`.
        """
        if question is not None or context is not None:
            deprecated("QuestionAnswerer.predict(question=..., context=...)", "answer(question=..., context=...)")
            return self.answer(question=question, context=context, top_k=top_k)
        if is_token_ids(x):
            return super().predict(x, batch_size=batch_size, verbose=verbose)
        batches = self._question_batches(x, batch_size, questions, contexts)
        results = []
        for batch in self._map_batches(self._traced("window_logits"), batches, verbose):
            splits = np.cumsum(np.bincount(batch["example_index"], minlength=0))[:-1]
            starts = np.split(batch["start_logits"], splits)
            ends = np.split(batch["end_logits"], splits)
            results.extend({"start_logits": s, "end_logits": e} for s, e in zip(starts, ends))
        return results

    def answer(self, x=None, batch_size=None, verbose=0, *, question=None, context=None,
               questions=None, contexts=None, top_k=None):
        """Answers questions about contexts.

        Each answer is a dict: `text`, its character offsets `start` and
        `end` in the context (`context[start:end] == text`), and `score`, the
        span's `start_logit + end_logit`. An answer `""` at 0 is "no answer"
        (see `null_score_threshold`), scored by the `[CLS]` logits.

        Args:
            x: question records (dicts with `question` and `context`), or a
                `(questions, contexts)` tuple.
            batch_size: questions per model call (each gives one or more
                windows); default 32.
            verbose: show a progress bar over the batches.
            question, context: one question and its context.
            questions, contexts: lists of them.
            top_k: None for the best answer; a number for a list of the best
                `top_k` distinct spans (at most `n_best`; "no answer" is not
                among them).

        Returns:
            For `question`/`context`, one answer (or a list of `top_k`); else
            a list with one per question.
        """
        if question is not None or context is not None:
            if not isinstance(question, str) or not isinstance(context, str):
                raise TypeError("`question` and `context` must be one string each; use "
                                "`questions` and `contexts` for lists.")
            if x is not None or questions is not None or contexts is not None:
                raise ValueError("Give one `question` and `context`, or lists, not both.")
            return self.answer(questions=[question], contexts=[context], top_k=top_k)[0]
        from kbert.preprocessing.question_answerer_preprocessor import answer_dicts

        n_best = self._raw_input_preprocessor().n_best
        if top_k is not None and (int(top_k) != top_k or not 1 <= top_k <= n_best):
            raise ValueError(f"`top_k` must be None or from 1 to `n_best` ({n_best}), got {top_k!r}.")
        batches = self._question_batches(x, batch_size, questions, contexts)
        answers = []
        for batch in self._map_batches(self._traced("answer_batch"), batches, verbose):
            answers.extend(answer_dicts(batch, top_k))
        return answers

    def evaluate_report(self, x, y=None, batch_size=None, verbose=0):
        """SQuAD's exact match and F1 (0 to 100) of this model's answers.

        Args:
            x: question dicts as `kbert.data.load_squad` returns, each with
                its gold `answers` (any of them counts as right); or a
                `(questions, contexts)` tuple with the answers as `y`.
            y: for a tuple `x`, each question's gold answers (a list of
                `{"text", ...}` dicts, or one dict).
            batch_size: questions per model call.
            verbose: progress bar over the batches.

        Returns:
            `{"exact_match": float, "f1": float}`.
        """
        if y is None:
            records = list(x)
        else:
            records = [{"answers": answers if isinstance(answers, list) else [answers]} for answers in y]
            if len(records) != len(x[0]):
                raise ValueError(f"Got {len(x[0])} questions but {len(records)} answers.")
        predictions = self.answer(x, batch_size=batch_size, verbose=verbose)
        return squad_scores([p["text"] for p in predictions], records)

    evaluate_squad = evaluate_report


def _span_outputs(logits, is_token):
    """`start_logits` and `end_logits` from `(windows, width, 2)` logits; off the tokens, `NOT_A_TOKEN_LOGIT`.

    An answer never starts or ends on padding: its logits are left out of
    the softmax, so that a window's outputs and loss do not depend on the
    padding (or, packed, the other windows) beside it.
    """
    is_token = keras.ops.expand_dims(is_token, -1)
    logits = keras.ops.where(is_token, logits, keras.ops.cast(NOT_A_TOKEN_LOGIT, logits.dtype))
    start_logits, end_logits = keras.ops.unstack(logits, num=2, axis=-1)
    return {"start_logits": start_logits, "end_logits": end_logits}


def _question_answerer_preprocessor():
    from kbert.preprocessing.question_answerer_preprocessor import QuestionAnswererPreprocessor

    return QuestionAnswererPreprocessor
