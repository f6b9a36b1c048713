import collections

import pytest

from kbert.data import SICK_LABEL_NAMES, DataFormatError, load_sick
from kbert.data.sick import SICK_HEADER


@pytest.mark.parametrize(
    "split, pairs, label_counts",
    [
        # The published SemEval_set sizes and entailment/neutral/contradiction counts.
        ("train", 4439, (1274, 2524, 641)),
        ("trial", 495, (143, 281, 71)),
        ("test", 4906, (1404, 2790, 712)),
    ],
)
def test_real_file_counts(split, pairs, label_counts):
    (sentences_a, sentences_b), labels, scores = load_sick(split, relatedness=True)
    assert len(sentences_a) == len(sentences_b) == len(labels) == len(scores) == pairs
    counts = collections.Counter(labels)
    assert tuple(counts[i] for i in range(3)) == label_counts
    assert min(scores) >= 1.0 and max(scores) <= 5.0
    assert all(isinstance(s, str) and s and s == s.strip() for s in sentences_a + sentences_b)


def test_real_file_rows():
    (sentences_a, sentences_b), labels, scores = load_sick("train", relatedness=True)
    assert sentences_a[0] == "A group of kids is playing in a yard and an old man is standing in the background"
    assert sentences_b[0] == "A group of boys in a yard is playing and a man is standing in the background"
    assert SICK_LABEL_NAMES[labels[0]] == "neutral" and scores[0] == 4.5
    (trial_a, _), trial_labels = load_sick("trial")
    assert trial_a[0] == "The young boys are playing outdoors and the man is smiling nearby"
    assert SICK_LABEL_NAMES[trial_labels[0]] == "contradiction"
    # The three splits are disjoint and cover all 9,840 pairs.
    all_pairs = set()
    for split in ("train", "trial", "test"):
        (a, b), _ = load_sick(split)
        all_pairs |= {(x, y, split) for x, y in zip(a, b)}
    assert len(all_pairs) == 9840


def row(pair_id=1, a="A man sings", b="A person sings", label="ENTAILMENT", score="4.8", split="TRAIN"):
    fields = [str(pair_id), a, b, label, score, "A_entails_B", "B_entails_A", a, b, "FLICKR", "FLICKR", split]
    return "\t".join(fields)


def write(tmp_path, lines, line_end="\r\n"):
    path = tmp_path / "SICK.txt"
    path.write_text(line_end.join(["\t".join(SICK_HEADER), *lines]))
    return path


def test_splits_labels_and_scores_from_a_small_file(tmp_path):
    path = write(tmp_path, [
        row(1, label="ENTAILMENT", score="4.8"),
        row(2, a="A dog runs", b="No dog runs", label="CONTRADICTION", score="3.0", split="TEST"),
        row(3, a=" A cat naps ", b="A cat sleeps", label="NEUTRAL", score="1", split="TRAIN"),
        row(4, split="TRIAL"),
    ])
    assert load_sick("train", path=path) == ((["A man sings", "A cat naps"], ["A person sings", "A cat sleeps"]), [0, 1])
    assert load_sick("test", path=path, relatedness=True) == ((["A dog runs"], ["No dog runs"]), [2], [3.0])
    assert load_sick("trial", path=path)[1] == [0]


@pytest.mark.parametrize(
    "lines, line_number, fragment",
    [
        ([row(), row(2, label="MAYBE")], 3, "unknown entailment_label 'MAYBE'"),
        ([row(), row(2, split="DEV")], 3, "unknown SemEval_set 'DEV'"),
        ([row(split="TEST"), row(2, score="high")], 3, "relatedness_score 'high' is not a number"),
        ([row(2, score="7.5")], 2, "from 1 to 5"),
        ([row(), "1\tonly\tthree"], 3, "expected 12 tab-separated columns, found 3"),
        ([row(), row(2, b=" ")], 3, "a sentence of the pair is empty"),
    ],
    ids=["bad-label", "bad-split", "bad-score", "score-out-of-range", "short-row", "empty-sentence"],
)
def test_malformed_rows_name_file_and_line(tmp_path, lines, line_number, fragment):
    # Rows of every split are checked, not only those of the split asked for.
    path = write(tmp_path, lines)
    with pytest.raises(DataFormatError) as raised:
        load_sick("trial", path=path)
    message = str(raised.value)
    assert f"SICK.txt, line {line_number}:" in message
    assert fragment in message


def test_wrong_header_and_unknown_split(tmp_path):
    path = tmp_path / "SICK.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\n")
    with pytest.raises(DataFormatError, match="SICK.txt, line 1: expected the SICK header"):
        load_sick("train", path=path)
    with pytest.raises(ValueError, match="train, trial, test"):
        load_sick("dev", path=path)


def test_missing_file_says_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError) as raised:
        load_sick("train")
    message = str(raised.value)
    assert str(tmp_path / "data" / "sick" / "SICK.txt") in message
    assert "marcobaroni.org" in message


def test_pairs_feed_a_classifier_as_two_segments():
    import numpy as np

    import kbert
    from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

    pairs, labels = load_sick("trial")
    pairs = (pairs[0][:8], pairs[1][:8])
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length=32)
    segment_ids = preprocessor(pairs)["segment_ids"].numpy()
    assert (segment_ids.max(axis=1) == 1).all()  # sentence B is segment 1 in every pair
    model = kbert.Classifier(kbert.Encoder(**tiny_encoder_kwargs()), 3, preprocessor)
    history = model.fit(pairs, labels[:8], batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
