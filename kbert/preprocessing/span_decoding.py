"""The reverse pass of a question answerer: span logits of windows to each question's best answers.

A span competes if it lies inside the context part of one window, starts at
or before it ends, and is at most `max_answer_length` tokens long; it scores
`start_logit + end_logit`, is widened to whole words (as BERT's reference
maps answers back to whole words) and cut from the original context by
character offsets. Decoding is TensorFlow ops, so a serving graph returns
answers; `answer_dicts` turns its results into Python dicts.
"""

import numpy as np
import tensorflow as tf


def decode_spans(start_logits, end_logits, windows, max_answer_length, n_best, null_score_threshold=None):
    """Each question's best answers from its windows' logits, with TF ops.

    Over all of a question's windows the best span wins. The score of "no
    answer" is the `[CLS]` score `start_logits[0] + end_logits[0]` (the
    lowest over the question's windows); with `null_score_threshold` set, a
    question is answered `""` when that score exceeds the best span's by
    more than the threshold (SQuAD v2.0).

    Args:
        start_logits, end_logits: `(windows, sequence_length)` logits.
        windows: a dict of `kbert.preprocessing.question_windows.
            QuestionWindows.build` (its `example_index`, `word_char_starts`,
            `word_char_ends` and `contexts`).
        max_answer_length: the longest answer, in tokens.
        n_best: candidate answers kept per question.
        null_score_threshold: None to always answer with a span, or a float.

    Returns:
        A dict of tensors, one row per question: `text` (string), `start`,
        `end` (character offsets, int32), `score` and `null_score`
        (float32), and the `n_best` candidates, best first, deduplicated:
        `candidate_texts`, `candidate_starts`, `candidate_ends`,
        `candidate_scores` (padded with "", 0, 0, -inf) and
        `candidate_counts`.

    Example:
    >>> from kbert.preprocessing.question_windows import QuestionWindows
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "sat", "the", "cat", "?", "."]
    >>> question_windows = QuestionWindows(kbert.Tokenizer(vocab), 12, doc_stride=2, max_question_length=4)
    >>> windows = question_windows.build(["who sat?"], ["the cat sat ."])
    >>> logits = tf.one_hot([6], 12) * 10.0  # [CLS] who sat ? [SEP] the cat: position 6
    >>> decode_spans(logits, logits, windows, max_answer_length=3, n_best=2)["text"].numpy().tolist()
    [b'cat']
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
    span = max_answer_length
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
    candidates = _best_distinct_spans(candidates, num_examples, n_best)

    null_scores = tf.math.unsorted_segment_min(
        start_logits[:, 0] + end_logits[:, 0], example_index, num_examples
    )
    has_span = candidates["counts"] > 0
    best_score = candidates["score"][:, 0]
    answer_null = tf.logical_not(has_span)
    if null_score_threshold is not None:
        answer_null |= null_scores - best_score > null_score_threshold
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


def answer_dicts(batch, top_k):
    """The results of `decode_spans` (NumPy arrays) as Python answer dicts.

    Args:
        batch: `decode_spans`'s dict, as NumPy arrays or tensors.
        top_k: None for each question's best answer, or how many of its
            candidates to list.

    Returns:
        A `{"text", "start", "end", "score"}` dict per question, or with
        `top_k` a list of them.
    """
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
