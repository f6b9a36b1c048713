"""The questions a question answerer takes from Python: question records, `(questions, contexts)` tuples, keywords.

Each form is checked (strings where strings belong, as many contexts as
questions, answers that name their text and first character) and comes out
as `QAExamples`, the one form the question answerer's preprocessing reads.
"""

import collections

# Questions with their contexts and, for training, one answer each: its first
# character and its text ("" for a question without an answer).
QAExamples = collections.namedtuple(
    "QAExamples", ["questions", "contexts", "answer_starts", "answer_texts"]
)


def is_records(x):
    """Whether `x` is question records: a non-empty list of dicts, as `kbert.data.load_squad` gives."""
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
    """`QAExamples` of questions given as keywords: lists of questions, contexts and (optionally) answers.

    Args:
        questions, contexts: lists of strings, one context per question.
        answer_starts, answer_texts: None, or each answer's first character
            in its context and its text ("" for none).

    Example:
    >>> keyword_examples(["who sat?"], ["the cat sat."], [4], ["cat"])
    QAExamples(questions=['who sat?'], contexts=['the cat sat.'], answer_starts=[4], answer_texts=['cat'])
    """
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
    """`QAExamples` of questions given as records, a `(questions, contexts)` tuple or `QAExamples`.

    Args:
        x: question records (dicts of `question`, `context` and, for
            training, `answers`), a `(questions, contexts)` tuple, or
            `QAExamples`.
        y: with a tuple, the answers: a `{"text", "answer_start"}` dict, or
            a list of them, per question (the first is kept).
        with_answers: whether answers are needed (training).

    Example:
    >>> record = {"question": "who sat?", "context": "the cat sat.", "answers": [{"text": "cat", "answer_start": 4}]}
    >>> as_examples([record], None, with_answers=True).answer_texts
    ['cat']
    """
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
