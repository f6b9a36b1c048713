import itertools
import re

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.preprocessing.tokenizer import SPECIAL_TOKENS
from tests.preprocessing.conftest import (
    bert_normalize,
    data_file,
    sms_spam_texts,
    sst2_dev_sentences,
)

SPECIALS = list(SPECIAL_TOKENS)

TEXTS = [
    "The cat sat on the mat.",
    "The dog sat on the log!",
    "Café naïve 日本 😀 cats, dogs?",
    "ΣΑΣ straße [MASK] the end",
]


def sst2_train_sentences(limit):
    """The first `limit` sentences of GLUE SST-2 train (column 0, header skipped)."""
    with open(data_file("glue", "SST-2", "train.tsv"), encoding="utf-8") as f:
        lines = f.read().splitlines()[1 : limit + 1]
    return [line.split("\t")[0] for line in lines]


def learn(data=None, **kwargs):
    kwargs.setdefault("vocabulary_size", 200)
    kwargs.setdefault("verbose", False)
    return kbert.learn_vocabulary(data, **kwargs)


@pytest.fixture(scope="module")
def vocabulary():
    return learn(TEXTS)


def training_characters(texts):
    """Every character of the texts as the uncased tokenizer sees them."""
    special = "|".join(re.escape(t) for t in SPECIAL_TOKENS)
    characters = set()
    for text in texts:
        characters.update(bert_normalize(re.sub(special, " ", text)))
    return {c for c in characters if not c.isspace()}


def test_starts_with_the_special_tokens_in_order(vocabulary):
    assert vocabulary[:5] == SPECIALS


def test_has_no_duplicates(vocabulary):
    assert len(set(vocabulary)) == len(vocabulary)
    assert all(isinstance(token, str) and token for token in vocabulary)


def test_special_tokens_in_the_text_are_not_learned_again(vocabulary):
    # "[MASK]" in the text stays whole and is not counted: no "[" or "##k".
    assert vocabulary.count("[MASK]") == 1
    assert "[" not in vocabulary
    assert "mask" not in vocabulary


def test_contains_every_character_and_its_continuation(vocabulary):
    characters = training_characters(TEXTS)
    # Normalised as the tokenizer does: "é" -> "e", "Σ" -> "σ"; "[MASK]" left out.
    assert {"c", "e", "日", "😀", "σ", "ß", ","} <= characters
    assert not {"é", "Σ", "[", "K"} & characters
    missing = sorted(c for c in characters if c not in vocabulary)
    missing_continuations = sorted(c for c in characters if "##" + c not in vocabulary)
    assert not missing
    assert not missing_continuations


def test_tokenizer_from_learned_vocabulary_has_no_unk_on_training_text(vocabulary):
    tokenizer = kbert.Tokenizer(vocabulary)
    ids = tokenizer(TEXTS).flat_values.numpy()
    assert ids.size > 0
    assert tokenizer.unk_token_id not in ids


def test_with_room_for_all_every_training_word_is_one_token():
    texts = ["the cat sat on the mat", "a dog sat on a log", "cats and dogs"]
    vocabulary = learn(texts, vocabulary_size=1000)
    for word in {w for t in texts for w in t.split()}:
        assert word in vocabulary
    tokenizer = kbert.Tokenizer(vocabulary)
    assert [len(row) for row in tokenizer(texts).to_list()] == [6, 6, 3]


def test_lowercase_by_default_strips_case_and_accents(vocabulary):
    learned = vocabulary[len(SPECIALS):]
    assert not [t for t in learned if t != t.lower()]
    assert "é" not in vocabulary and "ï" not in vocabulary
    assert "e" in vocabulary and "i" in vocabulary


def test_lowercase_false_keeps_case():
    vocabulary = learn(["The Cat saw the cat. Café"], lowercase=False)
    for token in ["T", "C", "t", "c", "é", "##é", "The", "the", "Cat", "cat"]:
        assert token in vocabulary, token
    tokenizer = kbert.Tokenizer(vocabulary, lowercase=False)
    ids = tokenizer(["The Cat saw the cat. Café"]).flat_values.numpy()
    assert tokenizer.unk_token_id not in ids


def test_strip_accents_false_keeps_accents():
    vocabulary = learn(["café naïve"], lowercase=True, strip_accents=False)
    assert "é" in vocabulary and "ï" in vocabulary
    assert "É" not in vocabulary


# Sources: lists, files, datasets.


@pytest.fixture
def text_files(tmp_path):
    (tmp_path / "a.txt").write_text("\n".join(TEXTS[:2]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(TEXTS[2:]) + "\n", encoding="utf-8")
    (tmp_path / "other.csv").write_text("zebra,zebra,zebra\n", encoding="utf-8")
    return tmp_path


def test_files_give_the_same_vocabulary_as_their_lines(text_files, vocabulary):
    pattern = str(text_files / "*.txt")
    assert learn([pattern]) == vocabulary
    assert learn(files=[pattern]) == vocabulary
    assert learn(files=pattern) == vocabulary
    assert learn(files=[str(text_files / "a.txt"), str(text_files / "b.txt")]) == vocabulary
    # A list whose entries all match files is read as files, not as text.
    assert learn([str(text_files / "a.txt"), str(text_files / "b.t?t")]) == vocabulary
    assert "zebra" not in vocabulary


def test_dataset_of_strings_gives_the_same_vocabulary(vocabulary):
    dataset = tf.data.Dataset.from_tensor_slices(TEXTS)
    assert learn(dataset) == vocabulary
    assert learn(dataset.batch(3)) == vocabulary


def test_dataset_of_text_label_pairs_gives_the_same_vocabulary(vocabulary):
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, np.arange(len(TEXTS))))
    assert learn(dataset) == vocabulary
    assert learn(dataset.batch(2)) == vocabulary


def test_numpy_array_and_tuple_give_the_same_vocabulary(vocabulary):
    assert learn(np.array(TEXTS)) == vocabulary
    assert learn(tuple(TEXTS)) == vocabulary


def test_batch_size_does_not_change_the_vocabulary(vocabulary):
    assert learn(TEXTS, batch_size=1) == vocabulary


# Errors.


def test_no_data_raises():
    with pytest.raises(ValueError, match="`data`"):
        kbert.learn_vocabulary(verbose=False)


@pytest.mark.parametrize("vocabulary_size", [5, 1, 0, -1])
def test_vocabulary_size_too_small_raises(vocabulary_size):
    with pytest.raises(ValueError, match="vocabulary_size"):
        learn(TEXTS, vocabulary_size=vocabulary_size)


def test_files_glob_matching_nothing_raises(text_files):
    missing = str(text_files / "nothing_*.txt")
    with pytest.raises(FileNotFoundError, match="nothing_"):
        learn(files=[missing])
    with pytest.raises(FileNotFoundError) as error:
        learn(files=[str(text_files / "a.txt"), missing])
    assert missing in str(error.value)
    assert "a.txt" not in str(error.value)


def test_only_empty_texts_raise():
    with pytest.raises(ValueError, match="No words"):
        learn(["", "   ", "\t"])


def test_single_string_raises():
    with pytest.raises(TypeError, match="single string"):
        learn("the cat sat")


def test_dataset_of_numbers_raises():
    with pytest.raises(TypeError, match="strings"):
        learn(tf.data.Dataset.from_tensor_slices([1, 2, 3]))


# Progress and size.


def test_verbose_reports_progress(capsys):
    vocabulary = kbert.learn_vocabulary(
        ["the cat sat", "the dog sat"], vocabulary_size=50, verbose=True
    )
    output = capsys.readouterr().out
    assert "2/2" in output
    assert "from 4 distinct words" in output  # the, cat, sat, dog
    assert f"Learned {len(vocabulary):,} tokens" in output


def test_quiet_prints_nothing(capsys):
    learn(["the cat sat"])
    assert capsys.readouterr().out == ""


def test_vocabulary_size_is_met_even_where_one_count_drops_many_pieces():
    # A few pieces seen often, the 27 words of three letters once each: the
    # learner's threshold jumps from far too many tokens (42) to far too few,
    # and TF-Text's own search returns 42 for all these sizes.
    texts = ["ab ba ab", "bc cb bc", " ".join("".join(p) for p in itertools.product("abc", repeat=3))]
    for size in (15, 20, 30):
        vocabulary = learn(texts, vocabulary_size=size)
        assert len(vocabulary) == size
        assert len(set(vocabulary)) == size


def test_the_alphabet_is_kept_when_it_alone_exceeds_the_size():
    vocabulary = learn(["ab ba ab"], vocabulary_size=10)
    assert len(vocabulary) <= 10
    vocabulary = learn(["abcdef"], vocabulary_size=10)
    # 5 special tokens and 6 characters, alone and as ## continuations.
    assert len(vocabulary) == 17
    tokenizer = kbert.Tokenizer(vocabulary)
    assert tokenizer.unk_token_id not in tokenizer(["fed cab"]).flat_values.numpy()


def test_a_short_text_gives_every_piece_it_has():
    vocabulary = learn(["the cat sat"], vocabulary_size=500)
    assert 5 < len(vocabulary) < 500
    assert {"the", "cat", "sat"} <= set(vocabulary)


@pytest.mark.slow
@pytest.mark.parametrize("size", [1000, 2000])
def test_vocabulary_size_is_met_within_one_percent_on_real_text(size):
    texts = sst2_train_sentences(3000)
    vocabulary = learn(texts, vocabulary_size=size)
    assert abs(len(vocabulary) - size) <= 0.01 * size
    assert vocabulary[:5] == SPECIALS and len(set(vocabulary)) == len(vocabulary)
    tokenizer = kbert.Tokenizer(vocabulary)
    # Every character is kept: the training text has no [UNK], and unseen
    # text has one only for a word with a character the text never had.
    assert tokenizer.unk_token_id not in tokenizer(texts).flat_values.numpy()
    dev = sst2_dev_sentences()
    unknown = tokenizer(dev).flat_values.numpy().tolist().count(tokenizer.unk_token_id)
    alphabet = {token for token in vocabulary if len(token) == 1}
    words = [w.decode() for w in tokenizer.pre_tokenize(dev).flat_values.numpy()]
    assert unknown <= sum(1 for word in words if not set(word) <= alphabet)


@pytest.mark.slow
def test_vocabulary_size_is_respected_on_a_real_corpus():
    texts = sms_spam_texts()
    vocabulary = learn(texts, vocabulary_size=2000)
    assert len(vocabulary) == 2000
    assert len(set(vocabulary)) == len(vocabulary)
    tokenizer = kbert.Tokenizer(vocabulary)
    ids = tokenizer(texts).flat_values.numpy()
    assert tokenizer.unk_token_id not in ids


# `kbert vocabulary` reads its files as every kbert text file is read (kbert.io.text_files).
def test_cli_learns_the_words_of_a_file_with_cr_line_ends(tmp_path, capsys):
    from kbert import cli

    corpus = tmp_path / "mac.txt"
    corpus.write_bytes(b"alpha beta\rgamma delta\r" * 10)  # old Mac line ends, as prepare-pretraining reads
    out = tmp_path / "vocab.txt"
    assert cli.main(["vocabulary", str(corpus), "--size", "100", "--out", str(out)]) == 0
    tokens = out.read_text().splitlines()
    assert {"alpha", "beta", "gamma", "delta"} <= set(tokens)
    assert not {"betagamma", "deltaalpha"} & set(tokens)


@pytest.mark.parametrize(
    "content, problem",
    [(b"the cat\nsat on \xe9 mat\n", "line 2: invalid UTF-8"), (b"the cat\r\nsat\x00on\r\n", "line 2: a NUL byte")],
    ids=["invalid-utf8", "nul"],
)
def test_cli_refuses_what_is_not_utf8_text_naming_file_and_line(tmp_path, capsys, content, problem):
    from kbert import cli

    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(content)
    assert cli.main(["vocabulary", str(corpus), "--size", "60", "--out", str(tmp_path / "v.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"bad.txt, {problem}" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "v.txt").exists()


def test_files_are_read_in_batches_bounded_in_bytes(tmp_path, monkeypatch):
    from kbert.preprocessing import vocabulary as vocabulary_module

    monkeypatch.setattr(vocabulary_module, "_BATCH_BYTES", 64)
    words = [f"w{i}" for i in range(100)]
    (tmp_path / "one_line.txt").write_text(" ".join(words))  # one line, far longer than a batch
    (tmp_path / "empty.txt").write_text("")
    batches = list(vocabulary_module._file_batches([str(tmp_path / "one_line.txt")], batch_size=1024))
    assert len(batches) > 5 and all(sum(len(t) for t in batch.numpy()) <= 64 for batch in batches)
    vocabulary = learn(files=[str(tmp_path / "one_line.txt")], vocabulary_size=400)
    assert set(words) <= set(vocabulary)  # no word was cut in two
    with pytest.raises(ValueError, match=r"empty\.txt: no words to learn a vocabulary from"):
        learn(files=[str(tmp_path / "empty.txt")])
