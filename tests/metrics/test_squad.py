import pytest

from kbert.metrics import exact_match, f1, normalize_answer, squad_scores


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Denver Broncos", "denver broncos"),
        ("  a   cat,  AN apple; the end.  ", "cat apple end"),
        ("theatre and anthem", "theatre and anthem"),  # articles only as whole words
        ("Saint-Étienne's!", "saintétiennes"),  # ASCII punctuation only; no accent folding
        ("the", ""),
        ("1,000 (approx.)", "1000 approx"),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_takes_the_best_gold():
    assert exact_match("the Broncos!", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("Denver", ["Denver Broncos", "Broncos"]) == 0.0
    # v2.0: no gold answers means the right answer is empty.
    assert exact_match("", []) == 1.0 and exact_match("cat", []) == 0.0


def test_f1_by_hand():
    # prediction "panthers", gold "carolina panthers": precision 1, recall 1/2, F1 2/3.
    assert f1("the Panthers", ["Carolina Panthers"]) == pytest.approx(2 / 3)
    # prediction "w x y z" vs gold "y z v": shared 2, precision 2/4, recall 2/3, F1 4/7.
    assert f1("w x y z", ["y z v"]) == pytest.approx(4 / 7)
    # "a" is an article: "a b c" vs "b c" is exact.
    assert f1("a b c", ["b c"]) == 1.0
    # Shared tokens count with repetition: "x x y" vs "x y y": shared 2 -> P = R = 2/3.
    assert f1("x x y", ["x y y"]) == pytest.approx(2 / 3)
    # Best over golds.
    assert f1("c d", ["a b", "c d e", "d"]) == pytest.approx(0.8)
    assert f1("nothing shared", ["other words"]) == 0.0
    # As the v1.1 script: an answer that normalises to nothing shares no token.
    assert f1("the", ["The"]) == 0.0 and exact_match("the", ["The"]) == 1.0
    # As the v2.0 script for an unanswerable question.
    assert f1("", []) == 1.0 and f1("a cat", []) == 0.0


def test_squad_scores_average_times_100():
    predictions = ["Denver Broncos", "the Panthers", "wrong", ""]
    references = [["Denver Broncos", "Broncos"], ["Carolina Panthers"], ["right"], []]
    scores = squad_scores(predictions, references)
    assert scores["exact_match"] == pytest.approx(100 * (1 + 0 + 0 + 1) / 4)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0 + 1) / 4)


def test_squad_scores_with_records_and_ids():
    records = [
        {"id": "a", "answers": [{"text": "Denver Broncos", "answer_start": 0}]},
        {"id": "b", "answers": [{"text": "Carolina Panthers", "answer_start": 5}, {"text": "Panthers", "answer_start": 14}]},
    ]
    by_id = squad_scores({"b": "The Panthers", "a": "Broncos"}, records)
    assert by_id == squad_scores(["Broncos", "The Panthers"], records)
    assert by_id["exact_match"] == 50.0
    assert by_id["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)


@pytest.mark.parametrize(
    "predictions, references, error, message",
    [
        (["a"], [["a"], ["b"]], ValueError, "Got 1 predictions for 2 questions"),
        ({"x": "a"}, [{"id": "x", "answers": []}, {"id": "y", "answers": []}], ValueError, "No prediction for 1 of the 2 questions, e.g. id 'y'"),
        ({"x": "a"}, [["a"]], TypeError, "has no 'id'"),
        ([None], [["a"]], TypeError, "Prediction 0 is a NoneType"),
        (["a"], ["a"], TypeError, "Reference 0 is a string"),
        ([], [], ValueError, "No questions"),
    ],
)
def test_bad_inputs_are_named(predictions, references, error, message):
    with pytest.raises(error, match=message):
        squad_scores(predictions, references)
