import collections

import pytest

from kbert.data import CONLL2003_LABELS, DataFormatError, load_conll2003, paths, read_conll


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def entity_counts(tags):
    return collections.Counter(t[2:] for sentence in tags for t in sentence if t.startswith("B-"))


# Published CoNLL-2003 statistics (Tjong Kim Sang and De Meulder, 2003, table 2):
# sentences, tokens, and entities per type after conversion to IOB2.
@pytest.mark.parametrize(
    "split, sentences, tokens, entities",
    [
        ("train", 14041, 203621, {"LOC": 7140, "MISC": 3438, "ORG": 6321, "PER": 6600}),
        ("dev", 3250, 51362, {"LOC": 1837, "MISC": 922, "ORG": 1341, "PER": 1842}),
        ("test", 3453, 46435, {"LOC": 1668, "MISC": 702, "ORG": 1661, "PER": 1617}),
    ],
)
def test_real_splits_counts(split, sentences, tokens, entities):
    words, tags = load_conll2003(split)
    assert len(words) == len(tags) == sentences
    assert sum(len(s) for s in words) == tokens
    assert all(len(w) == len(t) > 0 for w, t in zip(words, tags))
    assert dict(entity_counts(tags)) == entities
    assert {t for sentence in tags for t in sentence} == set(CONLL2003_LABELS)
    # IOB2: every entity starts with B-.
    for sentence in tags:
        for previous, tag in zip(["O"] + sentence, sentence):
            if tag.startswith("I-"):
                assert previous[2:] == tag[2:]


def test_real_first_sentences():
    words, tags = load_conll2003("train")
    assert words[0] == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert tags[0] == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert (words[1], tags[1]) == (["Peter", "Blackburn"], ["B-PER", "I-PER"])
    words, tags = load_conll2003("test")
    assert words[0][:3] == ["SOCCER", "-", "JAPAN"] and tags[0][:3] == ["O", "O", "B-LOC"]


def test_iob1_is_converted_to_iob2(tmp_path):
    path = write(
        tmp_path / "iob1.txt",
        "-DOCSTART- -X- O O\n\n"
        "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\nmet VBD I-VP O\n"
        "Anna NNP I-NP I-PER\nBob NNP I-NP B-PER\nin IN I-PP O\nNew NNP I-NP I-LOC\n"
        "York NNP I-NP I-LOC\nGerman JJ I-NP I-MISC\nBank NNP I-NP I-ORG\n",
    )
    sentences, tags = read_conll(path)
    assert sentences == [["Peter", "Blackburn", "met", "Anna", "Bob", "in", "New", "York", "German", "Bank"]]
    assert tags == [["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "B-LOC", "I-LOC", "B-MISC", "B-ORG"]]


def test_sentence_and_document_boundaries(tmp_path):
    # Blank lines (also several, or whitespace only) and -DOCSTART- end sentences;
    # an I- tag after a boundary starts a new entity; no blank line is needed at the end.
    path = write(
        tmp_path / "boundaries.txt",
        "\n\nA x x I-ORG\n \t\nB x x I-ORG\n-DOCSTART- -X- -X- O\nC x x I-ORG\n\n\n-DOCSTART- -X- -X- O\nD x x O",
    )
    sentences, tags = read_conll(path)
    assert sentences == [["A"], ["B"], ["C"], ["D"]]
    assert tags == [["B-ORG"], ["B-ORG"], ["B-ORG"], ["O"]]


def test_iob2_files_are_kept_and_checked(tmp_path):
    good = write(tmp_path / "good.txt", "a B-X\nb I-X\nc B-Y\n\nd O\n")
    assert read_conll(good, scheme="iob2", num_columns=2) == (
        [["a", "b", "c"], ["d"]], [["B-X", "I-X", "B-Y"], ["O"]]
    )
    bad = write(tmp_path / "bad.txt", "a B-X\nb I-Y\n")
    with pytest.raises(DataFormatError, match=r"bad.txt, line 2: tag 'I-Y' after 'B-X' starts an entity"):
        read_conll(bad, scheme="iob2", num_columns=2)
    # Read as IOB1, the same file is repaired.
    assert read_conll(bad, num_columns=None)[1] == [["B-X", "B-Y"]]


def test_any_column_count_when_asked(tmp_path):
    path = write(tmp_path / "two.txt", "Paris B-LOC\nis O\n")
    assert read_conll(path, num_columns=None) == ([["Paris", "is"]], [["B-LOC", "O"]])
    with pytest.raises(DataFormatError, match="line 1: expected 4 space-separated columns"):
        read_conll(path)


@pytest.mark.parametrize(
    "content, line_number, fragment",
    [
        ("EU NNP I-NP I-ORG\nrejects VBZ I-VP\n", 2, "expected 4 space-separated columns (word ... tag), found 3"),
        ("EU NNP I-NP I-ORG\n\nrejects VBZ I-VP O extra\n", 3, "found 5: 'rejects VBZ I-VP O extra'"),
        ("EU NNP I-NP I-ORG\nBerlin NNP I-NP I-CITY\n", 2, "unknown tag 'I-CITY'"),
        ("EU NNP I-NP i-ORG\n", 1, "unknown tag 'i-ORG'"),
        (b"EU NNP I-NP I-ORG\nM\xfcnchen NNP I-NP I-LOC\n", 2, "invalid UTF-8"),
    ],
    ids=["too-few-columns", "too-many-columns", "unknown-type", "bad-prefix", "invalid-utf8"],
)
def test_malformed_line_names_file_and_line(tmp_path, content, line_number, fragment):
    path = write(tmp_path / "bad.conll", content)
    with pytest.raises(DataFormatError) as raised:
        load_conll2003("train", path=path)
    message = str(raised.value)
    assert f"bad.conll, line {line_number}:" in message
    assert fragment in message
    assert raised.value.line_number == line_number


@pytest.mark.parametrize(
    "content, line_number, fragment",
    [
        ("a O\nb PER\n", 2, "tag 'PER' is not 'O', 'B-TYPE' or 'I-TYPE'"),
        ("a O\nb E-PER\n", 2, "tag 'E-PER'"),
        ("a O\nb B-\n", 2, "tag 'B-'"),
        ("a O\nb\n", 2, "expected 2 space-separated columns"),
        ("a\n", 1, "expected 2 space-separated columns"),
        ("a x O\nb O\n", 2, "expected 3 space-separated columns"),
    ],
)
def test_tag_syntax_is_checked_without_a_label_list(tmp_path, content, line_number, fragment):
    path = write(tmp_path / "any.txt", content)
    with pytest.raises(DataFormatError, match=f"any.txt, line {line_number}: .*{fragment}"):
        read_conll(path, num_columns=None)


def test_labels_restrict_tags(tmp_path):
    path = write(tmp_path / "t.txt", "a B-X\nb B-Z\n")
    with pytest.raises(DataFormatError, match=r"line 2: unknown tag 'B-Z', expected one of \['O', 'B-X'"):
        read_conll(path, labels=["O", "B-X", "I-X"], num_columns=2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown CoNLL-2003 split 'validation'"):
        load_conll2003("validation")
    with pytest.raises(ValueError, match="`scheme` must be one of"):
        read_conll("unused", scheme="bio")
    with pytest.raises(ValueError, match="`num_columns`"):
        read_conll("unused", num_columns=1)


def test_missing_file_explains_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(paths, "fetch_url", lambda url, out: pytest.fail("must not download"))
    with pytest.raises(FileNotFoundError) as raised:
        load_conll2003("dev")
    message = str(raised.value)
    assert str(tmp_path / "data" / "conll2003" / "eng.testa") in message
    assert "KBERT_DATA" in message and "clips.uantwerpen.be/conll2003" in message
