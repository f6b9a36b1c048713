import builtins
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tokenizers import BertWordPieceTokenizer

import kbert
from kbert.preprocessing import tokenizer as tokenizer_module
from kbert.preprocessing.tokenizer import SPECIAL_TOKENS, read_vocabulary
from tests.preprocessing.conftest import (
    bert_normalize,
    char_to_byte_offsets,
    squad_contexts,
)
from tests.test_case import (
    TINY_VOCABULARY,
    run_config_round_trip,
    run_preprocessing_equivalence,
)

SPECIALS = list(SPECIAL_TOKENS)


def ids_of(tokens, vocabulary=TINY_VOCABULARY):
    """Hand-written expected ids: the position of each token in the vocabulary."""
    return [vocabulary.index(token) for token in tokens]


def tokens_of(tokenizer, texts):
    return [[tokenizer.id_to_token(i) for i in row] for row in tokenizer(texts).to_list()]


@pytest.fixture(scope="module")
def tokenizer():
    return kbert.Tokenizer(TINY_VOCABULARY)


# Basic tokenization.


def test_tokenize_hand_checked_sentence(tokenizer):
    output = tokenizer(["The cats sat."])
    assert isinstance(output, tf.RaggedTensor)
    assert output.dtype == tf.int32
    assert output.to_list() == [ids_of(["the", "cat", "##s", "sat", "."])]


def test_tokenize_batch_keeps_one_row_per_text(tokenizer):
    output = tokenizer(["a dog sat on the mat", "", "see you soon!"])
    assert output.to_list() == [
        ids_of(["a", "dog", "sat", "on", "the", "mat"]),
        [],
        ids_of(["see", "you", "soon", "!"]),
    ]


def test_tokenize_method_equals_call(tokenizer):
    texts = ["the cats sat", "good film"]
    assert tokenizer.tokenize(texts).to_list() == tokenizer(texts).to_list()


def test_lowercase_true_folds_case(tokenizer):
    assert tokens_of(tokenizer, ["THE Cat SAT"]) == [["the", "cat", "sat"]]


def test_lowercase_false_keeps_case():
    cased = kbert.Tokenizer(SPECIALS + ["The", "the", "Cat", "cat"], lowercase=False)
    assert tokens_of(cased, ["The the Cat cat CAT"]) == [["The", "the", "Cat", "cat", "[UNK]"]]
    # Without lower-casing, accents are kept too by default.
    assert cased.strip_accents is False


def test_strip_accents_follows_lowercase_by_default():
    vocabulary = SPECIALS + ["cafe", "café", "naive", "naïve", "facade", "façade"]
    uncased = kbert.Tokenizer(vocabulary)
    assert uncased.strip_accents is True
    assert tokens_of(uncased, ["Café NAÏVE façade"]) == [["cafe", "naive", "facade"]]
    # A decomposed accent (e + U+0301) is stripped the same way.
    assert tokens_of(uncased, ["cafe\u0301"]) == [["cafe"]]


def test_strip_accents_false_keeps_accented_pieces():
    vocabulary = SPECIALS + ["cafe", "café", "naive", "naïve", "caf", "##e", "##é"]
    keep = kbert.Tokenizer(vocabulary, lowercase=True, strip_accents=False)
    assert tokens_of(keep, ["Café NAÏVE cafe"]) == [["café", "naïve", "cafe"]]
    # Cased and accent-stripped is a valid combination as well.
    stripped_cased = kbert.Tokenizer(
        SPECIALS + ["Cafe", "cafe"], lowercase=False, strip_accents=True
    )
    assert tokens_of(stripped_cased, ["Café café"]) == [["Cafe", "cafe"]]


def test_punctuation_is_split_into_single_tokens(tokenizer):
    assert tokens_of(tokenizer, ["cat,dog!sat?the.mat"]) == [
        ["cat", ",", "dog", "!", "sat", "?", "the", ".", "mat"]
    ]
    # ASCII symbols ($) and Unicode punctuation (…, «) are split off as well.
    assert tokens_of(tokenizer, ["cat$dog…sat«"]) == [
        ["cat", "[UNK]", "dog", "[UNK]", "sat", "[UNK]"]
    ]


def test_whitespace_of_all_kinds_separates_words(tokenizer):
    text = "the\tcat\nsat\r\non\u00a0the\u3000mat\u2028."
    assert tokens_of(tokenizer, [text]) == [["the", "cat", "sat", "on", "the", "mat", "."]]


def test_cjk_ideographs_are_each_a_token():
    vocabulary = SPECIALS + ["日", "本", "語", "##本", "##語", "の", "##の", "cat"]
    tokenizer = kbert.Tokenizer(vocabulary)
    # Never "日" "##本": each ideograph is a word of its own.
    assert tokens_of(tokenizer, ["日本語", "cat日cat"]) == [
        ["日", "本", "語"],
        ["cat", "日", "cat"],
    ]
    # Hiragana are not CJK ideographs and stay in one word, as in BERT.
    assert tokens_of(tokenizer, ["のの"]) == [["の", "##の"]]


def test_special_tokens_written_in_text_stay_whole(tokenizer):
    assert tokens_of(tokenizer, ["the [MASK] sat", "the[MASK]sat", "[CLS] a [SEP]"]) == [
        ["the", "[MASK]", "sat"],
        ["the", "[MASK]", "sat"],
        ["[CLS]", "a", "[SEP]"],
    ]
    # They are matched exactly, before lower-casing: "[mask]" is plain text.
    assert tokens_of(tokenizer, ["[mask]"]) == [["[UNK]", "[UNK]", "[UNK]"]]


def test_special_tokens_in_strings_false_splits_them_as_text():
    tokenizer = kbert.Tokenizer(TINY_VOCABULARY, special_tokens_in_strings=False)
    ids = tokenizer(["the [MASK] sat"]).to_list()[0]
    assert tokenizer.mask_token_id not in ids
    # "[", "mask", "]": none of them is in the tiny vocabulary.
    assert ids == ids_of(["the", "[UNK]", "[UNK]", "[UNK]", "sat"])


def test_unknown_word_becomes_unk(tokenizer):
    assert tokens_of(tokenizer, ["the zebra sat"]) == [["the", "[UNK]", "sat"]]
    # A word is [UNK] as a whole, even if a prefix is in the vocabulary.
    assert tokens_of(tokenizer, ["catx"]) == [["[UNK]"]]


def test_word_longer_than_max_chars_per_word_becomes_unk():
    tokenizer = kbert.Tokenizer(TINY_VOCABULARY, max_chars_per_word=5)
    assert tokens_of(tokenizer, ["catss"]) == [["cat", "##s", "##s"]]
    assert tokens_of(tokenizer, ["catsss"]) == [["[UNK]"]]


def test_default_max_chars_per_word_is_100(tokenizer):
    hundred = "cat" + "s" * 97
    assert tokenizer([hundred]).to_list() == [ids_of(["cat"] + ["##s"] * 97)]
    assert tokenizer([hundred + "s"]).to_list() == [ids_of(["[UNK]"])]


def test_max_chars_per_word_counts_characters_not_bytes():
    tokenizer = kbert.Tokenizer(
        SPECIALS + ["é", "##é"], strip_accents=False, max_chars_per_word=4
    )
    assert tokens_of(tokenizer, ["éééé"]) == [["é", "##é", "##é", "##é"]]
    assert tokens_of(tokenizer, ["ééééé"]) == [["[UNK]"]]


# Input shapes and types.


def test_scalar_input_returns_dense_1d(tokenizer):
    output = tokenizer("The cats sat.")
    assert isinstance(output, tf.Tensor)
    assert output.shape.rank == 1
    assert output.numpy().tolist() == ids_of(["the", "cat", "##s", "sat", "."])
    ids, starts, ends = tokenizer.tokenize_with_offsets("the cat")
    assert ids.shape.rank == starts.shape.rank == ends.shape.rank == 1
    assert starts.numpy().tolist() == [0, 4]
    assert ends.numpy().tolist() == [3, 7]


def test_accepts_bytes_numpy_and_column_batches(tokenizer):
    expected = [ids_of(["the", "cat"]), ids_of(["a"])]
    assert tokenizer([b"the cat", b"a"]).to_list() == expected
    assert tokenizer(np.array(["the cat", "a"])).to_list() == expected
    assert tokenizer(tf.constant([["the cat"], ["a"]])).to_list() == expected


def test_rejects_non_strings_and_deeper_batches(tokenizer):
    with pytest.raises(TypeError, match="strings"):
        tokenizer([1, 2])
    with pytest.raises(ValueError, match="1-D"):
        tokenizer([["a", "b"], ["c", "d"]])
    with pytest.raises(TypeError, match="ragged"):
        tokenizer(tf.ragged.constant([["a"], ["b", "c"]]))


# Vocabulary.


def test_vocabulary_from_list_and_from_file_are_equal(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCABULARY) + "\n", encoding="utf-8")
    from_list = kbert.Tokenizer(TINY_VOCABULARY)
    from_file = kbert.Tokenizer(str(path))
    from_pathlike = kbert.Tokenizer(path)
    assert from_file.get_vocabulary() == from_list.get_vocabulary() == TINY_VOCABULARY
    assert from_pathlike.get_vocabulary() == TINY_VOCABULARY
    texts = ["The cats sat on the mat.", "good film, see you soon!"]
    assert from_file(texts).to_list() == from_list(texts).to_list()


def test_a_vocabulary_bigger_than_tf_text_holds_is_refused_while_reading(tmp_path, monkeypatch):
    from kbert.preprocessing.tokenizer import MAX_VOCABULARY_SIZE

    assert MAX_VOCABULARY_SIZE == 4_194_304  # FastWordpieceTokenizer's RuntimeError is beyond
    # A list is refused by its length, before a token is looked at.
    with pytest.raises(ValueError, match="^The vocabulary list has 4,194,305 tokens, more than the 4,194,304 "):
        read_vocabulary(["x"] * (MAX_VOCABULARY_SIZE + 1))
    # A file is read no further than the limit (made small here: the real one is 4 M lines).
    monkeypatch.setattr(tokenizer_module, "MAX_VOCABULARY_SIZE", 30)
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCABULARY + [f"t{i}" for i in range(100)]) + "\n", encoding="utf-8")
    lines = []
    original = tokenizer_module.read_text_lines

    def counted(*args, **kwargs):
        for item in original(*args, **kwargs):
            lines.append(item[0])
            yield item

    monkeypatch.setattr(tokenizer_module, "read_text_lines", counted)
    with pytest.raises(ValueError) as error:
        read_vocabulary(str(path))
    assert str(error.value) == (f"{path}, line 31: more than 30 tokens, the most TF-Text's WordPiece tokenizer "
                                "holds; refused before reading further.")
    assert max(lines) == 31


def test_a_local_vocabulary_with_a_scheme_in_its_name_is_read_locally(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a:" / "b").mkdir(parents=True)
    (tmp_path / "a:" / "b" / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n", encoding="utf-8")
    assert read_vocabulary("a://b/vocab.txt") == TINY_VOCABULARY


def test_vocabulary_accessors(tokenizer):
    assert tokenizer.vocabulary_size() == len(TINY_VOCABULARY)
    vocabulary = tokenizer.get_vocabulary()
    vocabulary.append("extra")  # A copy: the tokenizer is unchanged.
    assert tokenizer.vocabulary_size() == len(TINY_VOCABULARY)
    assert (
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
        tokenizer.cls_token_id,
        tokenizer.sep_token_id,
        tokenizer.mask_token_id,
    ) == (0, 1, 2, 3, 4)
    assert tokenizer.special_token_ids == [0, 1, 2, 3, 4]


def test_special_token_ids_follow_the_vocabulary_order():
    vocabulary = ["the", "[SEP]", "[MASK]", "[UNK]", "cat", "[CLS]", "[PAD]"]
    tokenizer = kbert.Tokenizer(vocabulary)
    assert tokenizer.pad_token_id == 6
    assert tokenizer.unk_token_id == 3
    assert tokenizer.cls_token_id == 5
    assert tokenizer.sep_token_id == 1
    assert tokenizer.mask_token_id == 2
    assert tokenizer.special_token_ids == [1, 2, 3, 5, 6]
    assert tokenizer(["the dog [MASK]"]).to_list() == [[0, 3, 2]]


def test_token_to_id_and_id_to_token(tokenizer):
    for index, token in enumerate(TINY_VOCABULARY):
        assert tokenizer.token_to_id(token) == index
        assert tokenizer.id_to_token(index) == token
    assert tokenizer.id_to_token(np.int64(7)) == "cat"
    assert tokenizer.id_to_token(tf.constant(7)) == "cat"


def test_token_to_id_unknown_token_raises(tokenizer):
    with pytest.raises(KeyError, match="zebra"):
        tokenizer.token_to_id("zebra")


@pytest.mark.parametrize("token_id", [-1, len(TINY_VOCABULARY), 10**6])
def test_id_to_token_out_of_range_raises(tokenizer, token_id):
    with pytest.raises(IndexError, match=str(token_id)):
        tokenizer.id_to_token(token_id)


def test_read_vocabulary_returns_tokens_in_order(tmp_path):
    assert read_vocabulary(TINY_VOCABULARY) == TINY_VOCABULARY
    assert read_vocabulary([t.encode() for t in TINY_VOCABULARY]) == TINY_VOCABULARY
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCABULARY), encoding="utf-8")
    assert read_vocabulary(str(path)) == TINY_VOCABULARY


def test_read_vocabulary_missing_special_tokens_names_them():
    with pytest.raises(ValueError, match="special tokens") as error:
        read_vocabulary(["[PAD]", "[UNK]", "the", "cat"])
    message = str(error.value)
    assert "['[CLS]', '[SEP]', '[MASK]']" in message
    # The tokenizer itself refuses such a vocabulary the same way.
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        kbert.Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the"])


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"\xef\xbb\xbf" + "\r\n".join(TINY_VOCABULARY).encode() + b"\r\n", None),
        ("\n".join(TINY_VOCABULARY[:6] + ["c\x00t"] + TINY_VOCABULARY[7:]).encode(), "line 7: a NUL byte"),
        ("\n".join(TINY_VOCABULARY[:6]).encode() + b"\ncaf\xe9\n", "line 7: invalid UTF-8"),
    ],
    ids=["bom-and-crlf", "nul-in-a-token", "not-utf8"],
)
def test_cli_reads_vocabulary_files_as_text_files(tmp_path, capsys, content, problem):
    # Vocabulary files go through kbert.io.text_files, as every text file kbert takes.
    from kbert import cli
    from tests.pretraining.pretraining_run import write_corpus

    write_corpus(tmp_path / "corpus", documents=2, sentences=6)
    (tmp_path / "vocab.txt").write_bytes(content)
    status = cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"),
                       "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared"),
                       "--sequence-length", "16"])
    err = capsys.readouterr().err.strip()
    if problem is None:
        assert status == 0, err
        assert read_vocabulary(str(tmp_path / "vocab.txt")) == TINY_VOCABULARY
    else:
        assert status == 2 and f"vocab.txt, {problem}" in err and len(err.splitlines()) == 1
        assert not (tmp_path / "prepared").exists()


def test_a_nul_in_a_token_list_is_refused_before_wordpiece_sees_it():
    with pytest.raises(ValueError, match=r"the vocabulary list, line 7: a token holds a NUL"):
        kbert.Tokenizer(TINY_VOCABULARY[:6] + ["c\x00t"] + TINY_VOCABULARY[7:])


def test_read_vocabulary_duplicate_token_names_token_and_lines(tmp_path):
    lines = SPECIALS + ["the", "cat", "the"]
    with pytest.raises(ValueError) as error:
        read_vocabulary(lines)
    assert "'the'" in str(error.value)
    assert "line 8" in str(error.value)
    assert "line 6" in str(error.value)
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ValueError) as error:
        read_vocabulary(str(path))
    assert str(path) in str(error.value)
    assert "'the'" in str(error.value) and "line 8" in str(error.value)


@pytest.mark.parametrize("bad_token", ["", " the", "cat "])
def test_read_vocabulary_rejects_empty_or_padded_tokens(bad_token):
    with pytest.raises(ValueError, match="line 6"):
        read_vocabulary(SPECIALS + [bad_token])


def test_read_vocabulary_missing_file(tmp_path):
    path = tmp_path / "no_such_vocab.txt"
    with pytest.raises(FileNotFoundError, match="no_such_vocab.txt"):
        read_vocabulary(str(path))
    with pytest.raises(FileNotFoundError):
        kbert.Tokenizer(str(path))


# Detokenization.


def test_detokenize_round_trip(tokenizer):
    texts = ["the cats sat on the mat .", "see you soon !"]
    output = tokenizer.detokenize(tokenizer(texts))
    assert output.numpy().tolist() == [t.encode() for t in texts]


def test_detokenize_skip_special_tokens(tokenizer):
    ids = [ids_of(["[CLS]", "the", "cat", "##s", "[SEP]", "[PAD]", "[PAD]"])]
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"the cats"]
    assert tokenizer.detokenize(ids, skip_special_tokens=False).numpy().tolist() == [
        b"[CLS] the cats [SEP] [PAD] [PAD]"
    ]


def test_detokenize_one_sequence_returns_a_scalar(tokenizer):
    output = tokenizer.detokenize(tokenizer("The cats sat."))
    assert output.shape.rank == 0
    assert output.numpy() == b"the cats sat ."


def test_detokenize_dense_batch(tokenizer):
    dense = tf.constant([ids_of(["the", "cat", "[PAD]"]), ids_of(["a", "dog", "##s"])])
    assert tokenizer.detokenize(dense).numpy().tolist() == [b"the cat", b"a dogs"]


# Keras layer behaviour.


def test_config_round_trip(tokenizer):
    restored = run_config_round_trip(tokenizer, tf.constant(["The cats sat.", "[MASK] zebra"]))
    assert restored.get_vocabulary() == TINY_VOCABULARY


def test_config_round_trip_keeps_options():
    tokenizer = kbert.Tokenizer(
        TINY_VOCABULARY,
        lowercase=False,
        strip_accents=True,
        special_tokens_in_strings=False,
        max_chars_per_word=7,
    )
    config = tokenizer.get_config()
    assert config["lowercase"] is False
    assert config["strip_accents"] is True
    assert config["special_tokens_in_strings"] is False
    assert config["max_chars_per_word"] == 7
    run_config_round_trip(tokenizer, tf.constant(["The [MASK] catsssss sat."]))


def test_keras_serialization_round_trip(tokenizer):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(tokenizer))
    assert isinstance(restored, kbert.Tokenizer)
    assert restored(["the cats"]).to_list() == tokenizer(["the cats"]).to_list()


def forbid_reading(monkeypatch, path):
    """Fails the test if `path` is looked up or opened, through `tf.io.gfile` or `open`."""

    def guarded(real):
        def call(name, *args, **kwargs):
            if isinstance(name, (str, os.PathLike)) and os.fspath(name) == path:
                pytest.fail(f"{path} was read")
            return real(name, *args, **kwargs)

        return call

    gfile = tokenizer_module.tf.io.gfile
    monkeypatch.setattr(gfile, "exists", guarded(gfile.exists))
    monkeypatch.setattr(gfile, "GFile", guarded(gfile.GFile))
    monkeypatch.setattr(builtins, "open", guarded(builtins.open))


@pytest.mark.parametrize("kind", ["vocab_file", "/etc/passwd", "gs://bucket/vocab.txt"])
def test_config_naming_a_vocabulary_path_is_refused_in_safe_mode(tokenizer, tmp_path, monkeypatch, kind):
    if kind == "vocab_file":
        path = tmp_path / "vocab.txt"
        path.write_text("\n".join(TINY_VOCABULARY) + "\n", encoding="utf-8")
        value = str(path)
    else:
        value = kind
        forbid_reading(monkeypatch, value)
    serialized = keras.saving.serialize_keras_object(tokenizer)
    serialized["config"]["vocabulary"] = value
    with pytest.raises(ValueError, match="vocabulary") as error:
        keras.saving.deserialize_keras_object(serialized)
    assert value in str(error.value) and "safe_mode=False" in str(error.value)
    if kind == "vocab_file":
        # A trusted file may still name one.
        restored = keras.saving.deserialize_keras_object(serialized, safe_mode=False)
        assert restored.get_vocabulary() == TINY_VOCABULARY


def test_direct_tf_data_and_tf_function_agree(tokenizer):
    run_preprocessing_equivalence(
        tokenizer, tf.constant(["The cats sat.", "", "[MASK] café 日本 zebra!"])
    )


def test_direct_tf_data_and_tf_function_agree_on_a_scalar(tokenizer):
    output = run_preprocessing_equivalence(tokenizer, tf.constant("a dog sat"))
    assert output.numpy().tolist() == ids_of(["a", "dog", "sat"])


# Bad input: the tokenizer never fails on any string.

BAD_INPUTS = [
    b"",
    b"   \t\n ",
    b"ab\xff\xfecd",
    b"\xe2\x82",
    b"\xc0\xaf\xed\xa0\x80",
    "😀🤗 ❤️".encode(),
    "日本語のテキスト".encode(),
    b"the\x00cat\x01\x02\x1f\x7f",
    "\u200b\ufeff\u200d".encode(),
    "e\u0301\u0301\u0301".encode(),
    b"[MASK][SEP][CLS][PAD][UNK]",
]


@pytest.mark.parametrize("text", BAD_INPUTS, ids=repr)
def test_bad_input_never_fails(tokenizer, text):
    ids = tokenizer([text]).to_list()[0]
    assert all(0 <= i < len(TINY_VOCABULARY) for i in ids)
    ids_again, starts, ends = tokenizer.tokenize_with_offsets([text])
    assert ids_again.to_list()[0] == ids
    replaced = text.decode("utf-8", errors="replace").encode("utf-8")
    for start, end in zip(starts.to_list()[0], ends.to_list()[0]):
        assert 0 <= start < end <= len(replaced)


def test_bad_input_hand_checked(tokenizer):
    assert tokenizer([b"", b"   \t\n ", b"\xe2\x82", b"\x00\x01"]).to_list() == [[], [], [], []]
    # Invalid bytes and control characters are dropped, not word breaks.
    assert tokens_of(tokenizer, [b"c\xffat", b"c\x00a\x01t\x7f"]) == [["cat"], ["cat"]]


@pytest.mark.parametrize("max_tokens", [1, 2, 5])
def test_cut_and_bound_texts_equal_cutting_the_whole_text_made_valid(tokenizer, max_tokens):
    # The cut reads bytes before it makes them valid UTF-8: what it keeps is
    # what a cut of the whole text, made valid first, keeps.
    limit = max_tokens * tokenizer.chars_per_token
    texts = BAD_INPUTS + ["é" * 400, "日本" * 100, "é\u3000  " * 300, b"\x80" * 500 + b" the cat",
                         b"\xc3" * 700 + b"\xa9", b"a" * (limit - 1) + "é".encode(), b"a" * limit + b"\xe6\x97"]
    valid = tf.strings.regex_replace(
        tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD),
        r"\x00", "\x01")
    collapsed = tf.strings.regex_replace(valid, tokenizer.separator_runs, " ")
    expected = tf.strings.substr(collapsed, 0, limit, unit="UTF8_CHAR").numpy().tolist()
    assert tokenizer.cut_texts(texts, max_tokens).numpy().tolist() == expected
    fits = (tf.strings.length(collapsed, unit="UTF8_CHAR") <= limit).numpy()
    assert tokenizer.bound_texts(texts, max_tokens).numpy().tolist() == [
        whole if fit else cut for whole, cut, fit in zip(valid.numpy().tolist(), expected, fits)
    ]


def test_cutting_a_long_text_reads_it_whole_once(tmp_path):
    from tests.memory import current_mb, peak_since_reset, reset_peak

    tokenizer = kbert.Tokenizer(TINY_VOCABULARY)
    cut = tf.function(lambda texts: tokenizer.cut_texts(texts, 128))
    cut(tf.constant(["the cat"]))
    path = tmp_path / "long.txt"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(25):
            f.write("é" * 1_000_000)  # 50 MB of a 2-byte character in all
    text = tf.reshape(tf.io.read_file(str(path)), [1])  # no copy in Python
    # This test's own peak: the worker's may be higher from an earlier test.
    if not reset_peak():
        pytest.skip("the process's memory peak cannot be reset here (/proc/self/clear_refs)")
    before = current_mb()
    assert tf.strings.length(cut(text), unit="UTF8_CHAR").numpy().tolist() == [128 * 101]
    # The separator runs are read whole; every other step reads the bytes
    # the kept characters can take. Measured: about 95 MB, where making the
    # whole text valid UTF-8 first took about 170 MB.
    assert peak_since_reset() - before < 130


def test_hundred_thousand_characters(tokenizer):
    text = "the cat " * 12_500
    assert len(text) == 100_000
    ids = tokenizer([text]).to_list()[0]
    assert ids == ids_of(["the", "cat"]) * 12_500
    assert tokenizer(["x" * 100_000]).to_list() == [[tokenizer.unk_token_id]]


# Offsets.


def test_offsets_hand_checked(tokenizer):
    ids, starts, ends = tokenizer.tokenize_with_offsets(["The cats sat.", "  a dog "])
    assert ids.to_list() == [ids_of(["the", "cat", "##s", "sat", "."]), ids_of(["a", "dog"])]
    assert starts.to_list() == [[0, 4, 7, 9, 12], [2, 4]]
    assert ends.to_list() == [[3, 7, 8, 12, 13], [3, 7]]
    assert starts.dtype == ends.dtype == tf.int64


def test_offsets_are_bytes_and_cover_accents():
    vocabulary = SPECIALS + ["caf", "##e", "日", "本"]
    tokenizer = kbert.Tokenizer(vocabulary)
    ids, starts, ends = tokenizer.tokenize_with_offsets(["Café 日本 cafe\u0301e"])
    assert ids.to_list() == [ids_of(["caf", "##e", "日", "本", "caf", "##e", "##e"], vocabulary)]
    # "é" and U+0301 are 2 bytes, each ideograph 3. The last piece of a word
    # ends at the word's end, after its accent; an accent inside a word, which
    # normalises to nothing, is left between two pieces (as HF does).
    assert list(zip(starts.to_list()[0], ends.to_list()[0])) == [
        (0, 3), (3, 5), (6, 9), (9, 12), (13, 16), (16, 17), (19, 20)
    ]


def tokenize_with_spans(tokenizer, texts):
    """`[(ids, [(start, end), ...]), ...]`, one batched call for all texts."""
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(texts))
    assert ids.to_list() == tokenizer(texts).to_list()
    return [
        (row_ids, list(zip(row_starts, row_ends)))
        for row_ids, row_starts, row_ends in zip(ids.to_list(), starts.to_list(), ends.to_list())
    ]


def check_spans(tokenizer, text, ids, spans):
    """Each token's byte slice of `text`, normalised, is its piece."""
    data = text.encode("utf-8")
    previous_end = 0
    for token_id, (start, end) in zip(ids, spans):
        assert previous_end <= start < end <= len(data), (text, start, end)
        previous_end = end
        span = data[start:end].decode("utf-8")
        token = tokenizer.id_to_token(token_id)
        if token in SPECIAL_TOKENS and token_id != tokenizer.unk_token_id:
            assert span == token, (text, span)
        elif token_id == tokenizer.unk_token_id:
            assert span.strip() == span and span, (text, span)
        elif token.startswith("##"):
            assert bert_normalize(span) == token[2:], (text, span, token)
        else:
            assert bert_normalize(span) == token, (text, span, token)


def check_offsets(tokenizer, text):
    [(ids, spans)] = tokenize_with_spans(tokenizer, [text])
    check_spans(tokenizer, text, ids, spans)
    return ids, spans


OFFSET_EDGE_STRINGS = [
    "café",
    "naïve façade",
    "I ❤️ 🤗 emoji 😀!",
    "日本語のテキスト",
    "a\u0301b",
    "  leading and trailing  ",
    "İstanbul ΣΑΣ 2½ ﬁne",
    "x\x00y\x01z\x7f",
    "\ufeffbom and zero\u200bwidth",
    "e\u0301\u0301 à",
    "Ünïcödé ÀÉÎÕÜ",
    "[MASK] is [mask]",
    "hello-world's (test)",
]


@pytest.mark.parametrize("text", OFFSET_EDGE_STRINGS, ids=repr)
def test_offsets_edge_strings_slice_back_to_pieces(bert_tokenizer, text):
    check_offsets(bert_tokenizer, text)


def test_offsets_invalid_utf8_index_the_replaced_text(bert_tokenizer):
    raw = b"ab\xff\xfecd \xe2\x82xy"
    replaced = raw.decode("utf-8", errors="replace")  # Same replacement as TF's.
    ids, starts, ends = bert_tokenizer.tokenize_with_offsets([raw])
    assert ids.to_list() == bert_tokenizer([replaced]).to_list()
    check_offsets(bert_tokenizer, replaced)
    assert ends.to_list()[0][-1] == len(replaced.encode("utf-8"))


@pytest.fixture(scope="module")
def reference(bert_vocabulary):
    """The reference BERT tokenizer, Hugging Face `tokenizers`."""
    return BertWordPieceTokenizer(bert_vocabulary, lowercase=True)


def hf_byte_offsets(encoding, text):
    table = char_to_byte_offsets(text)
    return [(table[start], table[end]) for start, end in encoding.offsets]


def assert_offsets_agree_with_reference(text, ids, spans, encoding):
    """Offsets equal HF's, or cover HF's plus characters that normalise away.

    kbert's first piece of a word starts at the word's first character and its
    last piece ends after the word's last, so leading dropped characters and
    trailing combining marks (which HF leaves out) belong to the word's pieces.
    """
    assert ids == encoding.ids, text
    reference = hf_byte_offsets(encoding, text)
    data = text.encode("utf-8")
    for (start, end), (hf_start, hf_end) in zip(spans, reference):
        if (start, end) == (hf_start, hf_end):
            continue
        assert start <= hf_start and hf_end <= end, (text, (start, end), (hf_start, hf_end))
        extra = data[start:hf_start].decode() + data[hf_end:end].decode()
        assert bert_normalize(extra) == "", (text, extra)


def test_offsets_on_squad_contexts_slice_back_and_match_hugging_face(bert_tokenizer, reference):
    contexts = squad_contexts(50)
    encodings = reference.encode_batch(contexts, add_special_tokens=False)
    ascii_contexts = 0
    rows = tokenize_with_spans(bert_tokenizer, contexts)
    for context, encoding, (ids, spans) in zip(contexts, encodings, rows):
        check_spans(bert_tokenizer, context, ids, spans)
        if context.isascii():
            ascii_contexts += 1
            assert ids == encoding.ids, context
            assert spans == hf_byte_offsets(encoding, context), context
        else:
            assert_offsets_agree_with_reference(context, ids, spans, encoding)
    assert ascii_contexts >= 10


@pytest.mark.parametrize("text", OFFSET_EDGE_STRINGS, ids=repr)
def test_offsets_match_hugging_face_on_edge_strings(bert_tokenizer, reference, text):
    ids, spans = check_offsets(bert_tokenizer, text)
    encoding = reference.encode(text, add_special_tokens=False)
    assert_offsets_agree_with_reference(text, ids, spans, encoding)


def test_offsets_of_trailing_accent_and_leading_format_character(bert_tokenizer):
    # Documented differences from HF: the accent and the BOM belong to the word.
    _, spans = check_offsets(bert_tokenizer, "e\u0301 \ufeffbom")
    assert spans[0] == (0, 3)  # "e" + U+0301; HF says (0, 1).
    assert spans[1][0] == 4  # From the BOM; HF starts after it, at 7.


def test_continuation_ids_are_the_word_pieces():
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "play", "##ing", "##s", "#", "the"]
    tokenizer = kbert.Tokenizer(vocabulary)
    assert tokenizer.continuation_ids() == [6, 7]
    ids = tokenizer(["the playing plays"]).to_list()[0]
    # Each word's first piece is not a continuation, the others are.
    assert [i in tokenizer.continuation_ids() for i in ids] == [False, False, True, False, True]


def test_cli_train_refuses_an_uppercase_vocabulary_unless_cased(tmp_path, monkeypatch, capsys):
    from kbert import cli

    upper = SPECIALS + [token.upper() for token in TINY_VOCABULARY[5:]]
    (tmp_path / "vocab.txt").write_text("\n".join(upper) + "\n")
    rows = "sentence\tlabel\n" + "THE CAT SAT .\t1\nA BAD FILM !\t0\n" * 4
    for split in ("train", "dev"):
        path = tmp_path / "data" / "glue" / "SST-2" / f"{split}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rows)
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    arguments = ["train", "sst2", "--encoder", "tiny", "--vocabulary", str(tmp_path / "vocab.txt"),
                 "--out", str(tmp_path / "run"), "--epochs", "1", "--sequence-length", "16",
                 "--batch-size", "4", "--quiet"]
    assert cli.main(arguments) == 2
    err = capsys.readouterr().err.strip()
    assert "vocab.txt: 18 of its 18 word tokens have capital letters" in err and "--cased" in err
    assert len(err.splitlines()) == 1

    assert cli.main(arguments + ["--cased"]) == 0
    tokenizer = kbert.load_model(str(tmp_path / "run" / "model.keras")).preprocessor.tokenizer
    assert not tokenizer.lowercase
    assert tokens_of(tokenizer, ["THE CATS SAT."]) == [["THE", "CAT", "##S", "SAT", "."]]
