"""kbert.Tokenizer gives the ids of the reference BERT tokenizer (HF `tokenizers`)."""

import pytest
from tokenizers import BertWordPieceTokenizer

import kbert
from tests.preprocessing.conftest import squad_contexts, sst2_dev_sentences

EDGE_STRINGS = [
    "İstanbul",
    "ΣΑΣ and ΟΔΟΣ",
    "2½ and x²",
    "ﬁne ﬂow ﬀ",
    "non\u00a0breaking\u00a0space",
    "zero\u200bwidth\u200cjoiner\u200d",
    "tab\there\nnew\rline\x0bvt\x0cff",
    "control\x00chars\x01\x02\x1b\x7f\x85",
    "emoji 😀🤗❤️👍🏽 🇺🇸",
    "日本語のテキスト, 中文 and 한국어",
    "[MASK] is [mask]",
    "[CLS][SEP] [PAD] [UNK] the[MASK]end",
    "café naïve façade Ünïcödé ÀÉÎÕÜ",
    "e\u0301 a\u0300\u0301 \u0301",
    "\ufeffbom \ufffd replacement",
    "ｆｕｌｌ ｗｉｄｔｈ ①②③ Ⅻ",
    "ß straße ǅ ǈ",
    "Ωmega ω µ μ",
    "hello-world's (test) $5.00 50% #tag @user",
    "«quotes» “curly” ‘single’ … — –",
    "x" * 99 + " " + "y" * 101,
    "",
    "   ",
]


@pytest.fixture(scope="module")
def reference(bert_vocabulary):
    return BertWordPieceTokenizer(bert_vocabulary, lowercase=True)


def assert_same_ids(tokenizer, reference, texts):
    ours = tokenizer(texts).to_list()
    theirs = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    mismatches = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if mismatches:
        lines = [f"{len(mismatches)} of {len(texts)} texts differ; the first ones:"]
        for i in mismatches[:5]:
            lines.append(f"text: {texts[i]!r}")
            lines.append(f"  kbert: {[tokenizer.id_to_token(t) for t in ours[i]]}")
            lines.append(f"  HF:    {[tokenizer.id_to_token(t) for t in theirs[i]]}")
        pytest.fail("\n".join(lines))
    assert len(ours) == len(texts)


def test_parity_on_sst2_dev(bert_tokenizer, reference):
    sentences = sst2_dev_sentences()
    assert len(sentences) == 872
    assert_same_ids(bert_tokenizer, reference, sentences)


def test_parity_on_squad_dev_contexts(bert_tokenizer, reference):
    contexts = squad_contexts(1000)
    assert len(contexts) == 1000
    assert_same_ids(bert_tokenizer, reference, contexts)


@pytest.mark.parametrize("text", EDGE_STRINGS, ids=repr)
def test_parity_on_edge_strings(bert_tokenizer, reference, text):
    assert_same_ids(bert_tokenizer, reference, [text])


def test_parity_on_edge_strings_sanity(bert_tokenizer):
    # The hard cases do what BERT does, checked by hand.
    def tokens(text):
        return [bert_tokenizer.id_to_token(i) for i in bert_tokenizer(text).numpy()]

    assert tokens("İstanbul") == ["istanbul"]
    assert tokens("ΣΑΣ") == ["σ", "##α", "##σ"]  # Not the final "ς".
    assert tokens("2½") == ["2", "##½"]  # No NFKC folding.
    assert tokens("[MASK] is [mask]") == ["[MASK]", "is", "[", "mask", "]"]
    assert tokens("non\u00a0breaking") == ["non", "breaking"]
    # A zero-width space is a format character: dropped, not a word break.
    assert tokens("zero\u200bwidth") == tokens("zerowidth") != tokens("zero width")


def test_parity_from_vocabulary_list(bert_vocabulary, reference):
    with open(bert_vocabulary, encoding="utf-8") as f:
        tokens = f.read().splitlines()
    tokenizer = kbert.Tokenizer(tokens, lowercase=True)
    assert tokenizer.vocabulary_size() == reference.get_vocab_size() == 30522
    assert_same_ids(tokenizer, reference, sst2_dev_sentences()[:100])
