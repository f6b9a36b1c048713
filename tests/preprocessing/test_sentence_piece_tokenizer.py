"""kbert.SentencePieceTokenizer: ALBERT's tokenization on TF-Text's SentencePiece op."""

import keras
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

import kbert
from kbert.preprocessing.sentence_piece_tokenizer import SPECIAL_TOKENS, WORD_START
from tests.preprocessing.conftest import sms_spam_texts, squad_contexts, sst2_dev_sentences
from tests.preprocessing.test_tokenizer_parity import EDGE_STRINGS
from tests.albert import albert_prepare, albert_reference_ids, albert_sentence_piece_model
from tests.test_case import run_config_round_trip, run_preprocessing_equivalence


def rte_texts(limit):
    from tests.preprocessing.conftest import data_file

    with open(data_file("glue", "RTE", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:]]
    return [text for row in rows[:limit] for text in row[1:3]]


DATA_SETS = {
    "sst2": lambda: sst2_dev_sentences()[:300],
    "rte": lambda: rte_texts(150),
    "squad": lambda: squad_contexts(300)[-200:],  # not the contexts the model was trained on
    "sms": lambda: sms_spam_texts()[:300],
}
EDGE_TEXTS = [text for text in EDGE_STRINGS if "[" not in text] + [
    "``Quoted'' text, ``twice'' ```three''' ",
    "in 1999, 10,000 people, 2,500,000 and 3,",
    "ΑΣ ΟΔΟΣ. σΣ Σ",
]


@pytest.fixture(scope="module")
def proto():
    return albert_sentence_piece_model()


@pytest.fixture(scope="module")
def processor(proto):
    return sentencepiece.SentencePieceProcessor(model_proto=proto)


@pytest.fixture(scope="module")
def tokenizer(proto):
    return kbert.SentencePieceTokenizer(proto)


def same_score(processor, ids_a, ids_b):
    """Two segmentations of the same text with the same unigram score (a tie)."""
    score = lambda ids: sum(processor.get_score(i) for i in ids)  # noqa: E731
    return processor.decode(ids_a) == processor.decode(ids_b) and np.isclose(
        score(ids_a), score(ids_b), rtol=0, atol=1e-4
    )


def assert_reference_ids(tokenizer, processor, texts):
    """Ids equal TF-Text's op on the reference's prepared text, and the library's but for ties.

    TF-Text's SentencePiece build breaks exact score ties (such as "1|0|00"
    against "1|00|0") the other way from the `sentencepiece` 0.2.3 library.
    NUL characters are dropped (TF string ops end strings there), where the
    library makes them `<unk>`.
    """
    ours = tokenizer(texts).to_list()
    texts = [text.replace("\x00", "") for text in texts]
    op = tf_text.SentencepieceTokenizer(tokenizer.proto, out_type=tf.int32)
    op_ids = op.tokenize([albert_prepare(t) for t in texts]).to_list()
    library_ids = [albert_reference_ids(processor, t) for t in texts]
    differences, ties = [], 0
    for text, mine, op, library in zip(texts, ours, op_ids, library_ids):
        if mine != op or (mine != library and not same_score(processor, mine, library)):
            differences.append((text, mine, library))
        ties += mine != library
    if differences:
        lines = [f"{len(differences)} of {len(texts)} texts differ; the first ones:"]
        for text, mine, library in differences[:5]:
            lines += [f"text: {text!r}", f"  kbert:   {[processor.id_to_piece(i) for i in mine]}",
                      f"  library: {[processor.id_to_piece(i) for i in library]}"]
        pytest.fail("\n".join(lines))
    assert ties <= len(texts) // 20  # ties are rare; most texts match the library exactly
    return ours


# Ids: the sentencepiece library on ALBERT's prepared text.


@pytest.mark.parametrize("name", sorted(DATA_SETS))
def test_ids_equal_the_sentencepiece_library_on_the_data_sets(tokenizer, processor, name):
    texts = DATA_SETS[name]()
    assert len(texts) >= 200
    ours = assert_reference_ids(tokenizer, processor, texts)
    assert sum(map(len, ours)) > 20 * len(texts) // 2


def test_ids_equal_the_library_on_edge_strings(tokenizer, processor):
    assert_reference_ids(tokenizer, processor, EDGE_TEXTS)


def test_digit_comma_pieces_are_split_as_albert_does(processor):
    # ALBERT's own model has pieces such as "9,"; here they are user-defined.
    import io

    from tests.albert import training_lines

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()[:800]), model_writer=model, vocab_size=400,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]"],
        user_defined_symbols=["[MASK]", "0,", "9,", "\u25811999,"], minloglevel=2, num_threads=1,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    tokenizer = kbert.SentencePieceTokenizer(model.getvalue())
    texts = ["in 1999, 10,000 people and 2010, x", "19,", "in 1999, we"]
    raw = [processor.encode(albert_prepare(t), out_type=str) for t in texts]
    assert any(piece.endswith(",") and len(piece) > 1 for row in raw for piece in row)
    ours = tokenizer(texts).to_list()
    assert ours == [albert_reference_ids(processor, t) for t in texts]
    pieces = [[tokenizer.id_to_token(i) for i in row] for row in ours]
    assert all(not (p.endswith(",") and len(p) > 1) for row in pieces for p in row)
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    for text, row, s, e in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        for token, start, end in zip(row, s, e):
            if tokenizer.id_to_token(token) == ",":
                assert text.encode()[start:end] == b","


# Preparation: case, accents, whitespace, quotes, special tokens.


def test_lowercase_and_accents(proto):
    cased = kbert.SentencePieceTokenizer(proto, lowercase=False)
    uncased = kbert.SentencePieceTokenizer(proto)
    assert cased.strip_accents is False and uncased.strip_accents is True
    assert uncased(["The CAFÉ"]).to_list() == uncased(["the cafe"]).to_list()
    assert cased(["The CAFÉ"]).to_list() != uncased(["The CAFÉ"]).to_list()


def test_whitespace_runs_and_double_quotes_are_normalised(tokenizer):
    assert tokenizer(["  a\t\n good\u00a0 film  "]).to_list() == tokenizer(["a good film"]).to_list()
    assert tokenizer(["``good''"]).to_list() == tokenizer(['"good"']).to_list()


def test_special_tokens_written_in_text_stay_whole(tokenizer):
    ids = tokenizer(["the [MASK] sat[SEP]on <pad>", "[CLS]"]).to_list()
    tokens = [[tokenizer.id_to_token(i) for i in row] for row in ids]
    assert tokens[0][1] == "[MASK]" and tokens[0].count("[SEP]") == 1 and tokens[0][-1] == "<pad>"
    # The text between special tokens is tokenized on its own.
    assert tokens[0][2:tokens[0].index("[SEP]")] == [tokenizer.id_to_token(i) for i in tokenizer(["sat"])[0]]
    assert tokens[1] == ["[CLS]"]


def test_special_tokens_in_strings_false_tokenizes_them_as_text(proto):
    tokenizer = kbert.SentencePieceTokenizer(proto, special_tokens_in_strings=False)
    ids = tokenizer(["the [MASK] sat"])[0].numpy().tolist()
    assert tokenizer.mask_token_id not in ids


def test_special_token_ids_are_albert_s(tokenizer):
    assert [tokenizer.id_to_token(i) for i in tokenizer.special_token_ids] == list(SPECIAL_TOKENS)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id,
            tokenizer.sep_token_id, tokenizer.mask_token_id) == (0, 1, 2, 3, 4)


def test_a_model_without_albert_special_pieces_is_rejected():
    import io

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["the cat sat on the mat"] * 10), model_writer=model, vocab_size=20,
        model_type="char", minloglevel=2,
    )
    with pytest.raises(ValueError, match=r"lacks the special pieces \['<pad>', '\[CLS\]'"):
        kbert.SentencePieceTokenizer(model.getvalue())
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        kbert.SentencePieceTokenizer(b"not a model")
    with pytest.raises(FileNotFoundError, match="spiece.model"):
        kbert.SentencePieceTokenizer("/no/such/spiece.model")


# Vocabulary.


def test_vocabulary_accessors_agree_with_the_library(tokenizer, processor):
    assert tokenizer.vocabulary_size() == processor.get_piece_size()
    assert tokenizer.get_vocabulary() == [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    assert tokenizer.token_to_id(f"{WORD_START}the") == processor.piece_to_id(f"{WORD_START}the")
    assert tokenizer.id_to_token(5) == processor.id_to_piece(5)
    with pytest.raises(KeyError):
        tokenizer.token_to_id("[PAD]")


def test_continuation_ids(tokenizer):
    continuing = set(tokenizer.continuation_ids())
    vocabulary = tokenizer.get_vocabulary()
    assert continuing
    for i, piece in enumerate(vocabulary):
        starts_word = piece.startswith(WORD_START) or i in tokenizer.special_token_ids or (
            all(not c.isalnum() for c in piece) and piece in ",.;:!?'\"()-"
        )
        if starts_word:
            assert i not in continuing, piece
    assert tokenizer.token_to_id(f"{WORD_START}the") not in continuing
    assert tokenizer.token_to_id("s") in continuing


# Offsets.


def test_offsets_slice_back_to_the_pieces(tokenizer):
    texts = squad_contexts(300)[-100:] + sst2_dev_sentences()[:100] + EDGE_TEXTS
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    assert ids.to_list() == tokenizer(texts).to_list()
    checked = exact = 0
    for text, row, row_starts, row_ends in zip(texts, ids.to_list(), starts.to_list(), ends.to_list()):
        data = text.encode("utf-8")
        assert row_starts == sorted(row_starts) and row_ends == sorted(row_ends)
        # Pieces of one character ("½" is "1", "⁄", "2") share its span.
        spans = {}
        for token, start, end in zip(row, row_starts, row_ends):
            assert 0 <= start <= end <= len(data)
            piece = tokenizer.id_to_token(token).removeprefix(WORD_START)
            if piece == "":
                assert start == end  # a lone "▁" covers nothing
                continue
            spans.setdefault((start, end), []).append(piece)
        for (start, end), pieces in spans.items():
            span = data[start:end].decode("utf-8")
            assert span and span == span.strip()
            if "<unk>" not in pieces:
                # A character that prepares to several ("ﬁ") may be split
                # between tokens: each token covers all of it.
                prepared = albert_prepare(span).replace(" ", "")
                assert "".join(pieces) in prepared, (text, pieces, span)
                checked += 1
                exact += "".join(pieces) == prepared
    assert checked > 10_000 and exact > 0.999 * checked


def test_offsets_hand_checked(tokenizer):
    text = "  Café ``naïve''  x"
    ids, starts, ends = tokenizer.tokenize_with_offsets(text)
    data = text.encode()
    spans = [data[s:e].decode() for s, e in zip(starts.numpy(), ends.numpy())]
    # Each token's characters, accents included, without the space before them.
    assert "".join(spans).replace("\x01", "") == "Café``naïve''x"
    assert all(span == span.strip() for span in spans)


def test_offsets_of_special_tokens_and_empty_texts(tokenizer):
    ids, starts, ends = tokenizer.tokenize_with_offsets(["", "a [MASK] b", "   "])
    assert ids.to_list()[0] == [] and ids.to_list()[2] == []
    row = ids.to_list()[1]
    position = row.index(tokenizer.mask_token_id)
    assert (starts.to_list()[1][position], ends.to_list()[1][position]) == (2, 8)


# The layer: shapes, tf.data, tf.function, config.


def test_scalar_batch_and_column_inputs(tokenizer):
    one = tokenizer("the film")
    assert isinstance(one, tf.Tensor) and one.dtype == tf.int32
    batch = tokenizer(["the film", "a cat"])
    assert isinstance(batch, tf.RaggedTensor) and batch.dtype == tf.int32
    assert one.numpy().tolist() == batch[0].numpy().tolist()
    assert tokenizer(np.array([["the film"], ["a cat"]])).to_list() == batch.to_list()
    assert tokenizer.tokenize(["the film"]).to_list() == batch[:1].to_list()
    with pytest.raises(TypeError, match="strings"):
        tokenizer([1, 2])


def test_direct_tf_data_and_tf_function_agree(tokenizer):
    texts = tf.constant(sst2_dev_sentences()[:32] + ["", "the [MASK] sat", "in 1999, 10,000 x"])
    run_preprocessing_equivalence(tokenizer, texts)
    offsets = tf.function(tokenizer.tokenize_with_offsets)(texts)
    for a, b in zip(offsets, tokenizer.tokenize_with_offsets(texts)):
        assert a.to_list() == b.to_list()


def test_config_round_trip(proto):
    tokenizer = kbert.SentencePieceTokenizer(proto, lowercase=False, special_tokens_in_strings=False)
    restored = run_config_round_trip(tokenizer, tf.constant(["The Film, in 1999."]))
    assert restored.proto == proto
    assert not restored.lowercase and not restored.special_tokens_in_strings
    serialized = keras.saving.serialize_keras_object(tokenizer)
    again = keras.saving.deserialize_keras_object(serialized)
    assert isinstance(again, kbert.SentencePieceTokenizer) and again.proto == proto


# "QUJD!" decodes leniently to b"ABC"; the others do not decode at all.
@pytest.mark.parametrize("bad", ["not base64!", "QUJD!", "QUJ", "é"])
def test_config_proto_that_is_not_base64_names_proto(tokenizer, bad):
    config = {**tokenizer.get_config(), "proto": bad}
    with pytest.raises(ValueError, match="`proto` is not valid base64"):
        kbert.SentencePieceTokenizer.from_config(config)


def test_config_proto_that_is_a_path_is_refused_in_safe_mode(tokenizer, proto, tmp_path):
    path = tmp_path / "spiece.model"
    path.write_bytes(proto)
    serialized = keras.saving.serialize_keras_object(tokenizer)
    serialized["config"]["proto"] = path
    with pytest.raises(ValueError, match="proto") as error:
        keras.saving.deserialize_keras_object(serialized)
    assert str(path) in str(error.value)
    # A trusted file may still name one.
    assert keras.saving.deserialize_keras_object(serialized, safe_mode=False).proto == proto


def test_from_a_spiece_model_file(proto, tmp_path):
    path = tmp_path / "spiece.model"
    path.write_bytes(proto)
    assert kbert.SentencePieceTokenizer(str(path)).get_vocabulary() == kbert.SentencePieceTokenizer(
        proto
    ).get_vocabulary()


def test_detokenize(tokenizer):
    ids = tokenizer(["The film sat, in 1999.", "[CLS] a cat"])
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"the film sat, in 1999.", b"a cat"]
    assert tokenizer.detokenize(ids[0]).numpy() == b"the film sat, in 1999."


def test_split_words(tokenizer):
    texts, words, starts, ends = tokenizer.split_words(["  Hello, wide\tworld "])
    assert words.to_list() == [[b"Hello,", b"wide", b"world"]]
    data = texts.numpy()[0]
    assert [data[s:e] for s, e in zip(starts[0].numpy(), ends[0].numpy())] == words.to_list()[0]


def test_preprocessor_packs_albert_special_tokens(tokenizer):
    preprocessor = kbert.TextPacker(tokenizer, sequence_length=12)
    packed = preprocessor((["a good film"], ["bad"]))
    ids = packed["token_ids"].numpy()[0].tolist()
    assert ids[0] == tokenizer.cls_token_id and ids.count(tokenizer.sep_token_id) == 2
    assert ids[-1] == tokenizer.pad_token_id == 0
    restored = kbert.TextPacker.from_config(preprocessor.get_config())
    assert isinstance(restored.tokenizer, kbert.SentencePieceTokenizer)
