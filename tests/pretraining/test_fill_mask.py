import re

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.pretraining.fill_mask import FillMask, fill_mask
from kbert.pretraining.pretrainer import Pretrainer
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

EXCLUDED = {"[PAD]", "[CLS]", "[SEP]", "[MASK]"}
NUM_CANDIDATES = len(TINY_VOCABULARY) - len(EXCLUDED)


@pytest.fixture(scope="module")
def pretrainer():
    return Pretrainer(kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0))


def softmax(logits):
    logits = logits - logits.max(-1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


def test_lists_top_k_candidates_per_mask_in_order(pretrainer):
    fm = fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, top_k=4, sequence_length=16)
    predictions = fm("The [MASK] sat on the [MASK].")
    assert len(predictions) == 2
    for candidates in predictions:
        assert len(candidates) == 4
        for candidate in candidates:
            assert set(candidate) == {"token", "token_id", "score"}
            assert isinstance(candidate["token_id"], int) and isinstance(candidate["score"], float)
            assert candidate["token"] == TINY_VOCABULARY[candidate["token_id"]]
            assert 0 < candidate["score"] <= 1
        scores = [c["score"] for c in candidates]
        assert scores == sorted(scores, reverse=True)
    # The scores are the model's: softmax of the masked-LM logits at the
    # [MASK] positions ([CLS] the [MASK] sat on the [MASK] . [SEP]), without
    # the excluded tokens.
    x = kbert.TextPacker(fm.tokenizer, 16)(["The [MASK] sat on the [MASK]."])
    x = {name: value.numpy() for name, value in x.items()}
    x["mask_positions"] = np.array([[2, 6]], "int32")
    assert x["token_ids"][0, 2] == x["token_ids"][0, 6] == TINY_VOCABULARY.index("[MASK]")
    logits = pretrainer(x)["mlm"].numpy()[0]
    logits[:, [TINY_VOCABULARY.index(t) for t in EXCLUDED]] = -np.inf
    probabilities = softmax(logits)
    for mask, candidates in enumerate(predictions):
        best = np.argsort(-probabilities[mask])[:4]
        assert [c["token_id"] for c in candidates] == best.tolist()
        np.testing.assert_allclose(
            [c["score"] for c in candidates], probabilities[mask, best], rtol=1e-5
        )


def test_a_list_of_texts_gives_one_result_per_text(pretrainer):
    fm = FillMask(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), top_k=3, sequence_length=16)
    texts = ["a [MASK] film", "[MASK] [MASK] now !", "see you [MASK]"]
    results = fm(texts)
    assert [len(r) for r in results] == [1, 2, 1]
    for text, result in zip(texts, results):
        alone = fm(text)
        assert [[c["token_id"] for c in mask] for mask in result] == [
            [c["token_id"] for c in mask] for mask in alone
        ]
        np.testing.assert_allclose(
            [[c["score"] for c in mask] for mask in result],
            [[c["score"] for c in mask] for mask in alone],
            rtol=1e-5,
        )
    assert fm([]) == []


def test_runs_one_model_call_per_batch(pretrainer, monkeypatch):
    fm = FillMask(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), sequence_length=16, batch_size=2)
    calls = []
    predict_on_batch = pretrainer.predict_on_batch

    def counting(inputs):
        calls.append(inputs["token_ids"].shape[0])
        return predict_on_batch(inputs)

    monkeypatch.setattr(pretrainer, "predict_on_batch", counting)
    results = fm(["the [MASK]", "a [MASK]", "[MASK] cat", "[MASK] dog", "the [MASK] sat"])
    assert len(results) == 5 and calls == [2, 2, 1]


def test_scores_of_all_candidates_sum_to_one_without_special_tokens(pretrainer):
    fm = fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, top_k=NUM_CANDIDATES, sequence_length=16)
    (candidates,) = fm("the cat [MASK] on the mat .")
    tokens = [c["token"] for c in candidates]
    assert len(set(tokens)) == NUM_CANDIDATES
    assert not EXCLUDED & set(tokens)
    assert "[UNK]" in tokens
    assert all(c["score"] > 0 for c in candidates)
    np.testing.assert_allclose(sum(c["score"] for c in candidates), 1.0, rtol=1e-5)


def test_excluded_tokens_never_win_even_when_most_likely(pretrainer):
    # A head whose bias strongly favours [SEP] still never proposes it.
    fm = FillMask(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), top_k=1, sequence_length=16)
    bias = pretrainer.masked_lm_head._bias
    saved = bias.numpy()
    try:
        favoured = saved.copy()
        favoured[TINY_VOCABULARY.index("[SEP]")] = 100.0
        favoured[TINY_VOCABULARY.index("[UNK]")] = 50.0
        bias.assign(favoured)
        (candidates,) = fm("the [MASK] sat")
    finally:
        bias.assign(saved)
    assert candidates[0]["token"] == "[UNK]"


@pytest.mark.parametrize("top_k", [0, NUM_CANDIDATES + 1, 2.5])
def test_bad_top_k_is_refused(pretrainer, top_k):
    with pytest.raises(ValueError, match=f"`top_k` must be an integer from 1 to {NUM_CANDIDATES}"):
        fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, top_k=top_k, sequence_length=16)
    fm = fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, sequence_length=16)
    with pytest.raises(ValueError, match="`top_k` must be"):
        fm("the [MASK]", top_k=top_k)


@pytest.mark.parametrize("text", ["the cat sat", "the [mask] sat", ""])
def test_a_text_without_mask_is_refused_by_name(pretrainer, text):
    fm = fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, sequence_length=16)
    with pytest.raises(ValueError, match=re.escape(f"No [MASK] token in the text '{text}'")):
        fm(["the [MASK] sat", text])


def test_a_mask_cut_off_by_truncation_is_refused_by_name(pretrainer):
    fm = fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, sequence_length=6)
    assert len(fm("the cat [MASK] on")) == 1  # [CLS] + 4 tokens + [SEP] fits.
    text = "the [MASK] sat on [MASK]"
    with pytest.raises(ValueError, match=r"the text 'the \[MASK\] sat on \[MASK\]' falls past"):
        fm(text)


def test_bad_arguments_are_refused(pretrainer):
    tokenizer = kbert.Tokenizer(TINY_VOCABULARY)
    with pytest.raises(ValueError, match="either a `vocabulary`"):
        fill_mask(pretrainer)
    with pytest.raises(ValueError, match="either a `vocabulary`"):
        fill_mask(pretrainer, vocabulary=TINY_VOCABULARY, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="tokenizer has 9 tokens but the encoder embeds 27"):
        fill_mask(pretrainer, vocabulary=TINY_VOCABULARY[:9], sequence_length=16)
    with pytest.raises(ValueError, match="exceeds the encoder's `max_sequence_length` 32"):
        fill_mask(pretrainer, tokenizer=tokenizer, sequence_length=64)
    with pytest.raises(TypeError, match="must be a kbert.Pretrainer"):
        fill_mask(pretrainer.encoder, tokenizer=tokenizer)
    fm = fill_mask(pretrainer, vocabulary=tokenizer, sequence_length=16)  # a Tokenizer as vocabulary
    with pytest.raises(TypeError, match="Text 1 is a int"):
        fm(["the [MASK]", 3])


def test_predicts_the_word_a_trained_model_learned():
    """An MLM-only model that memorised one sentence fills its blanks."""
    tokenizer = kbert.Tokenizer(TINY_VOCABULARY)
    sentence = "the cat sat on the mat ."
    preprocessor = kbert.TextPacker(tokenizer, sequence_length=12)
    packed = {name: value.numpy() for name, value in preprocessor([sentence]).items()}
    words = int(packed["padding_mask"].sum()) - 2  # less [CLS] and [SEP]
    # One example per word: that word masked, to be predicted.
    x = {name: np.repeat(value, words, axis=0) for name, value in packed.items()}
    positions = np.arange(1, words + 1)
    labels = x["token_ids"][np.arange(words), positions].copy()
    x["token_ids"][np.arange(words), positions] = tokenizer.mask_token_id
    x["mask_positions"] = positions[:, None].astype("int32")
    y = {"mlm": labels[:, None]}
    sample_weight = {"mlm": np.ones((words, 1), "float32")}

    model = Pretrainer(kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0), next_sentence=False)
    model.compile(learning_rate=1e-2)
    dataset = tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(80)
    model.fit(dataset, verbose=0)

    fm = fill_mask(model, vocabulary=TINY_VOCABULARY, top_k=3, sequence_length=12)
    (cat,), (mat,) = fm(["the [MASK] sat on the mat .", "the cat sat on the [MASK] ."])
    assert cat[0]["token"] == "cat", cat
    assert mat[0]["token"] == "mat", mat
    assert cat[0]["score"] > 0.5
