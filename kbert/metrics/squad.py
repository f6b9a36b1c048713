"""SQuAD's exact match and F1, scored as the official evaluation scripts do."""

import collections
import re
import string

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text):
    """Normalises an answer as SQuAD's scripts do before comparing.

    Lower-cases, removes ASCII punctuation, removes the articles "a", "an"
    and "the" as whole words, and collapses whitespace.

    Example:
    >>> normalize_answer("The  Denver Broncos!")
    'denver broncos'
    """
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction, gold_answers):
    """1.0 if the prediction equals a gold answer after normalisation, else 0.0.

    An empty list of gold answers (a SQuAD v2.0 unanswerable question) counts
    as the single gold answer `""`, as the v2.0 script does.
    """
    gold_answers = list(gold_answers) or [""]
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in gold_answers))


def f1(prediction, gold_answers):
    """The best token-overlap F1 of the prediction against any gold answer.

    Tokens are the whitespace-separated words of the normalised texts; F1 is
    the harmonic mean of precision (shared tokens / predicted tokens) and
    recall (shared tokens / gold tokens), shared tokens counted with
    repetition. An unanswerable question (no gold answers) scores 1.0 for a
    prediction that normalises to nothing, else 0.0, as in the v2.0 script.
    """
    gold_answers = list(gold_answers)
    predicted = normalize_answer(prediction).split()
    if not gold_answers:
        return float(not predicted)
    return max(_token_f1(predicted, normalize_answer(gold).split()) for gold in gold_answers)


def _token_f1(predicted, gold):
    # As the v1.1 script: no shared token (both empty included) scores 0.
    shared = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted)
    recall = shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions, references):
    """SQuAD's exact match and F1, averaged over questions and times 100.

    Each question scores the best match over its gold answers; the averages
    are percentages, as the official script prints them. Answerable
    questions are scored exactly as by the v1.1 script; questions without
    gold answers (SQuAD v2.0) as by the v2.0 script, where only an empty
    prediction is right. (The v2.0 script also drops gold answers that
    normalise to nothing, such as "the"; 3 of the 34,726 v1.1 dev answers.)

    Args:
        predictions: the predicted answer texts, a list in the order of
            `references`, or a dict from question id to text.
        references: for each question, its list of gold answers (texts, or
            `{"text", ...}` dicts), or the question records of
            `kbert.data.load_squad`, which a dict of predictions is matched
            to by `id`.

    Returns:
        `{"exact_match": float, "f1": float}`, from 0 to 100.

    Example:
    >>> squad_scores(["Denver Broncos", "the Panthers"], [["Denver Broncos"], ["Carolina Panthers"]])
    {'exact_match': 50.0, 'f1': 83.33333333333333}
    """
    references = list(references)
    if isinstance(predictions, dict):
        ids = [_record_id(reference, i) for i, reference in enumerate(references)]
        missing = [question_id for question_id in ids if question_id not in predictions]
        if missing:
            raise ValueError(
                f"No prediction for {len(missing)} of the {len(ids)} questions, "
                f"e.g. id {missing[0]!r}; predict every question (an empty answer is allowed)."
            )
        predictions = [predictions[question_id] for question_id in ids]
    else:
        predictions = list(predictions)
        if len(predictions) != len(references):
            raise ValueError(f"Got {len(predictions)} predictions for {len(references)} questions.")
    if not references:
        raise ValueError("No questions to score.")
    exact_total = f1_total = 0.0
    for index, (prediction, reference) in enumerate(zip(predictions, references)):
        if not isinstance(prediction, str):
            raise TypeError(f"Prediction {index} is a {type(prediction).__name__}, not a string: {prediction!r}.")
        gold = _gold_texts(reference, index)
        exact_total += exact_match(prediction, gold)
        f1_total += f1(prediction, gold)
    return {
        "exact_match": 100.0 * exact_total / len(references),
        "f1": 100.0 * f1_total / len(references),
    }


def _record_id(reference, index):
    if not isinstance(reference, dict) or "id" not in reference:
        raise TypeError(
            f"Reference {index} has no 'id'; match predictions to questions by id with the "
            "records of kbert.data.load_squad, or give predictions as a list."
        )
    return reference["id"]


def _gold_texts(reference, index):
    answers = reference["answers"] if isinstance(reference, dict) else reference
    if isinstance(answers, str):
        raise TypeError(f"Reference {index} is a string; give a list of gold answers, e.g. [{answers!r}].")
    texts = []
    for answer in answers:
        text = answer["text"] if isinstance(answer, dict) else answer
        if not isinstance(text, str):
            raise TypeError(f"Reference {index} has a gold answer that is not a string: {text!r}.")
        texts.append(text)
    return texts
