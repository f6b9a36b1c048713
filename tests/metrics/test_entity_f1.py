import random

import pytest

from kbert.metrics import entity_scores, extract_entities


@pytest.mark.parametrize(
    "tags, entities",
    [
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
        # IOB1: I- after O starts an entity; B- splits two adjacent entities of one type.
        (["I-PER", "I-PER", "B-PER", "O", "I-LOC"], [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]),
        # A type change inside an "entity" ends it and starts another.
        (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),
        (["I-ORG", "I-MISC", "B-MISC"], [("ORG", 0, 1), ("MISC", 1, 2), ("MISC", 2, 3)]),
        # Entities running to the end of the sentence, one token or several.
        (["O", "O", "B-LOC"], [("LOC", 2, 3)]),
        (["O", "B-LOC", "I-LOC"], [("LOC", 1, 3)]),
        (["I-LOC"], [("LOC", 0, 1)]),
        # IOBES: E- and S- close an entity; I-/E- after them start one.
        (["S-PER", "B-LOC", "E-LOC", "E-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3), ("LOC", 3, 4), ("LOC", 4, 5)]),
        # Types with dashes keep them.
        (["B-GENE-X", "I-GENE-X"], [("GENE-X", 0, 2)]),
        (["O", "O"], []),
        ([], []),
    ],
)
def test_extract_entities(tags, entities):
    assert extract_entities(tags) == entities


def test_partly_wrong_prediction_by_hand():
    true = [["B-PER", "I-PER", "O", "B-LOC"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
    scores = entity_scores(true, predicted)
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.5, 0.5, 0.5)
    assert (scores["support"], scores["predicted"], scores["correct"]) == (2, 2, 1)
    assert sorted(scores["per_type"]) == ["LOC", "ORG", "PER"]
    assert scores["per_type"]["PER"] == {
        "precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1, "predicted": 1, "correct": 1
    }
    # A type never predicted or never true scores 0, not an error.
    assert scores["per_type"]["LOC"]["recall"] == 0.0 and scores["per_type"]["LOC"]["precision"] == 0.0
    assert scores["per_type"]["ORG"]["support"] == 0 and scores["per_type"]["ORG"]["f1"] == 0.0


def test_micro_average_over_sentences_by_hand():
    true = [
        ["B-PER", "I-PER", "O", "B-LOC"],   # PER(0,2), LOC(3,4)
        ["O", "B-ORG", "I-ORG", "O"],       # ORG(1,3)
    ]
    predicted = [
        ["B-PER", "O", "O", "I-LOC"],       # PER(0,1) wrong end; LOC(3,4) right (I- starts it)
        ["B-ORG", "I-ORG", "I-ORG", "B-ORG"],  # ORG(0,3) wrong start; ORG(3,4) spurious
    ]
    scores = entity_scores(true, predicted)
    # 3 true, 4 predicted, 1 correct.
    assert (scores["support"], scores["predicted"], scores["correct"]) == (3, 4, 1)
    assert scores["precision"] == pytest.approx(1 / 4)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(2 * (1 / 4) * (1 / 3) / (1 / 4 + 1 / 3))
    assert scores["per_type"]["LOC"]["f1"] == 1.0
    assert scores["per_type"]["ORG"]["predicted"] == 2 and scores["per_type"]["ORG"]["correct"] == 0
    assert scores["per_type"]["PER"]["correct"] == 0


def test_entities_do_not_cross_sentences():
    # The same tags in one sentence would be one PER entity.
    assert entity_scores([["B-PER", "I-PER"]], [["B-PER", "I-PER"]])["support"] == 1
    scores = entity_scores([["B-PER"], ["I-PER"]], [["B-PER", ], ["I-PER"]])
    assert scores["support"] == 2 and scores["correct"] == 2


def test_iob1_and_iob2_spellings_score_the_same():
    iob1 = [["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]]
    iob2 = [["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]]
    assert entity_scores(iob1, iob2)["f1"] == 1.0
    assert entity_scores(iob2, iob1)["f1"] == 1.0


def test_no_entities_anywhere_scores_zero():
    scores = entity_scores([["O", "O"]], [["O", "O"]])
    assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)
    assert scores["per_type"] == {}


@pytest.mark.parametrize(
    "true, predicted, error, message",
    [
        ([["O"]], [["O"], ["O"]], ValueError, "1 sentences of true tags but 2"),
        ([["O", "O"]], [["O"]], ValueError, "Sentence 0 has 2 true tags but 1 predicted"),
        ([["O", "PER"]], [["O", "O"]], ValueError, "Sentence 0 of the true tags: Tag 1 is 'PER'"),
        ([["O"]], [["X-PER"]], ValueError, "predicted tags: Tag 0 is 'X-PER'"),
        ([["O"]], [["B-"]], ValueError, "Tag 0 is 'B-'"),
        ([["O"]], [[3]], ValueError, "Tag 0 is a int"),
        (["O", "B-PER"], [["O", "B-PER"]], TypeError, "item 0 is the string 'O'"),
        ("O", [["O"]], TypeError, "got a string"),
    ],
)
def test_bad_input_is_named(true, predicted, error, message):
    with pytest.raises(error, match=message):
        entity_scores(true, predicted)


def random_tags(rng, length, prefixes=("B", "I")):
    tags = []
    for _ in range(length):
        if rng.random() < 0.4:
            tags.append("O")
        else:
            tags.append(f"{rng.choice(prefixes)}-{rng.choice(['PER', 'LOC', 'ORG'])}")
    return tags


@pytest.mark.parametrize("prefixes", [("B", "I"), ("B", "I", "E", "S")])
def test_matches_seqeval_on_random_tags(prefixes):
    """seqeval (default mode, in requirements-test.txt) is the reference."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    rng = random.Random(0)
    lengths = [rng.randint(0, 12) for _ in range(300)]
    true = [random_tags(rng, n, prefixes) for n in lengths]
    predicted = [random_tags(rng, n, prefixes) for n in lengths]
    scores = entity_scores(true, predicted)
    assert scores["precision"] == pytest.approx(precision_score(true, predicted))
    assert scores["recall"] == pytest.approx(recall_score(true, predicted))
    assert scores["f1"] == pytest.approx(f1_score(true, predicted))
    report = classification_report(true, predicted, output_dict=True)
    assert scores["support"] == report["micro avg"]["support"]
    for entity_type, expected in report.items():
        if entity_type.endswith(" avg"):
            continue
        ours = scores["per_type"][entity_type]
        assert ours["precision"] == pytest.approx(expected["precision"])
        assert ours["recall"] == pytest.approx(expected["recall"])
        assert ours["f1"] == pytest.approx(expected["f1-score"])
        assert ours["support"] == expected["support"]
