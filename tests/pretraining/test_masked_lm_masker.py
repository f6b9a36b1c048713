import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.pretraining.masked_lm_masker import MaskedLMMasker, default_max_predictions

# Ids as kbert.Tokenizer numbers them: [PAD] [UNK] [CLS] [SEP] [MASK], then text.
PAD, UNK, CLS, SEP, MASK = range(5)
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
VOCABULARY_SIZE = 100
# For whole words: ids 5..59 start words, 60..99 are "##" pieces.
CONTINUATIONS = list(range(60, 100))


def masker(**kwargs):
    kwargs.setdefault("vocabulary_size", VOCABULARY_SIZE)
    kwargs.setdefault("mask_token_id", MASK)
    kwargs.setdefault("special_token_ids", SPECIALS)
    return MaskedLMMasker(**kwargs)


def seed(a=1, b=2):
    return tf.constant([a, b], tf.int64)


def packed_batch(lengths, sequence_length, seed=0, low=5, high=VOCABULARY_SIZE, unk_rate=0.0):
    """Rows `[CLS] A [SEP] B [SEP] [PAD]...` with `lengths[i]` text tokens in all."""
    rng = np.random.default_rng(seed)
    rows = []
    for length in lengths:
        text = rng.integers(low, high, size=length)
        text[rng.random(length) < unk_rate] = UNK
        half = length // 2
        row = [CLS, *text[:half], SEP, *text[half:], SEP]
        rows.append(row + [PAD] * (sequence_length - len(row)))
    return np.array(rows, np.int32)


def to_numpy(outputs):
    return {name: value.numpy() for name, value in outputs.items()}


def chosen(outputs, row):
    """The chosen positions of a row (its entries with weight 1)."""
    return outputs["mask_positions"][row][outputs["mask_weights"][row] == 1]


def selectable_count(row):
    return int(np.isin(row, SPECIALS, invert=True).sum())


def expected_count(selectable, mask_rate, max_predictions):
    """min(ceil(mask_rate * selectable), max_predictions), in float32 as TF-Text
    computes it: 15 % of 100 is 15.0000006 there, so 16."""
    return min(math.ceil(np.float32(selectable) * np.float32(mask_rate)), max_predictions)


def replacement_shares(original, outputs):
    """Shares of the chosen tokens that became [MASK], another token, or stayed."""
    mask = random = kept = 0
    for row in range(len(original)):
        positions = chosen(outputs, row)
        new, old = outputs["token_ids"][row][positions], original[row][positions]
        mask += (new == MASK).sum()
        kept += (new == old).sum()
        random += ((new != MASK) & (new != old)).sum()
    total = mask + random + kept
    return total, mask / total, random / total, kept / total


def test_default_max_predictions():
    assert default_max_predictions(128, 0.15) == 20
    assert default_max_predictions(512, 0.15) == 77
    assert default_max_predictions(4, 0.1) == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mask_rate": 0.0}, "mask_rate"),
        ({"mask_rate": 1.5}, "mask_rate"),
        ({"mask_token_rate": 0.8, "random_token_rate": 0.3}, "sum to at most 1"),
        ({"random_token_rate": -0.1}, "random_token_rate"),
        ({"max_predictions": 0}, "max_predictions"),
        ({"whole_word": True}, "continuation_ids"),
        ({"vocabulary_size": 5}, "besides the special"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        masker(**kwargs)


def test_output_shapes_and_dtypes():
    token_ids = packed_batch([10, 20, 5], 32)
    outputs = masker(max_predictions=6)(token_ids, seed())
    assert outputs["token_ids"].shape == (3, 32) and outputs["token_ids"].dtype == tf.int32
    dtypes = {"mask_positions": tf.int32, "mask_ids": tf.int32, "mask_weights": tf.float32}
    for name, dtype in dtypes.items():
        assert outputs[name].shape == (3, 6) and outputs[name].dtype == dtype


def test_special_tokens_are_never_chosen():
    token_ids = packed_batch(list(range(4, 60)), 64, unk_rate=0.2)
    assert (token_ids == UNK).sum() > 100
    outputs = to_numpy(masker(mask_rate=0.5, max_predictions=64)(token_ids, seed()))
    for row in range(len(token_ids)):
        positions = chosen(outputs, row)
        assert not np.isin(token_ids[row][positions], SPECIALS).any()
    special = np.isin(token_ids, SPECIALS)
    np.testing.assert_array_equal(outputs["token_ids"][special], token_ids[special])


@pytest.mark.parametrize(
    "mask_rate, max_predictions", [(0.15, 20), (0.15, 5), (0.5, 12), (1.0, 64)]
)
def test_number_chosen_per_row(mask_rate, max_predictions):
    token_ids = packed_batch([0, 1, 6, 7, 20, 33, 60, 100, 125], 128, unk_rate=0.05)
    m = masker(mask_rate=mask_rate, max_predictions=max_predictions)
    outputs = to_numpy(m(token_ids, seed()))
    for row in range(len(token_ids)):
        expected = expected_count(selectable_count(token_ids[row]), mask_rate, max_predictions)
        weights = outputs["mask_weights"][row]
        padding = max_predictions - expected
        np.testing.assert_array_equal(weights, [1.0] * expected + [0.0] * padding)
        positions = chosen(outputs, row)
        assert len(set(positions.tolist())) == expected
        assert (np.diff(positions) > 0).all()  # in increasing order
        # Only the chosen tokens may change.
        unchosen = np.ones(128, bool)
        unchosen[positions] = False
        np.testing.assert_array_equal(outputs["token_ids"][row][unchosen], token_ids[row][unchosen])


def test_mask_ids_are_the_original_tokens_and_padding_entries_are_zero():
    token_ids = packed_batch([3, 30, 60], 64)
    outputs = to_numpy(masker(max_predictions=10)(token_ids, seed(5, 6)))
    for row in range(len(token_ids)):
        real = outputs["mask_weights"][row] == 1
        positions = outputs["mask_positions"][row]
        original = token_ids[row][positions[real]]
        np.testing.assert_array_equal(outputs["mask_ids"][row][real], original)
        assert (positions[~real] == 0).all() and (outputs["mask_ids"][row][~real] == 0).all()
        assert (outputs["mask_weights"][row][~real] == 0).all()
    assert (outputs["mask_weights"][0] == 0).sum() == 9  # 3 tokens: one chosen


def test_rows_without_selectable_tokens():
    token_ids = np.array([[CLS, SEP, SEP, PAD], [CLS, UNK, SEP, PAD]], np.int32)
    outputs = to_numpy(masker(max_predictions=3)(token_ids, seed()))
    np.testing.assert_array_equal(outputs["token_ids"], token_ids)
    assert (outputs["mask_weights"] == 0).all()


def test_80_10_10_shares_and_stock_tf_text_agree():
    token_ids = packed_batch([125] * 128, 128)
    m = masker(max_predictions=20)
    ours = to_numpy(m(token_ids, seed(11, 12)))
    total, mask, random, kept = replacement_shares(token_ids, ours)
    assert total == 128 * 19
    # The standard error of a share over 2,432 draws is at most 0.01.
    assert abs(mask - 0.8) < 0.025
    assert abs(random - 0.1 * (1 - 1 / 95)) < 0.02
    assert abs(kept - (0.1 + 0.1 / 95)) < 0.02
    replaced = ours["token_ids"][token_ids != ours["token_ids"]]
    assert not np.isin(replaced, [PAD, UNK, CLS, SEP]).any()

    # The maintained op, with TF-Text's stock chooser and selector (their
    # randomness is global: seeded here for a steady test, then unseeded).
    tf.random.set_seed(1234)
    try:
        stock_ids, stock_positions, stock_originals = tf_text.mask_language_model(
            tf.RaggedTensor.from_tensor(token_ids),
            item_selector=tf_text.RandomItemSelector(
                max_selections_per_batch=20, selection_rate=0.15, unselectable_ids=SPECIALS
            ),
            mask_values_chooser=tf_text.MaskValuesChooser(
                VOCABULARY_SIZE, MASK, mask_token_rate=0.8, random_token_rate=0.1
            ),
        )
    finally:
        tf.random.set_seed(None)
    stock_weights = tf.ones_like(stock_positions, tf.float32)
    stock = {
        "token_ids": stock_ids.to_tensor().numpy(),
        "mask_positions": stock_positions.to_tensor(shape=[None, 20]).numpy(),
        "mask_weights": stock_weights.to_tensor(shape=[None, 20]).numpy(),
    }
    np.testing.assert_array_equal(stock["mask_weights"], ours["mask_weights"])
    np.testing.assert_array_equal(
        stock_originals.to_tensor(shape=[None, 20]).numpy()[stock["mask_weights"] == 1],
        token_ids[np.arange(128)[:, None], stock["mask_positions"]][stock["mask_weights"] == 1],
    )
    _, stock_mask, stock_random, stock_kept = replacement_shares(token_ids, stock)
    assert abs(stock_mask - mask) < 0.03
    assert abs(stock_random - random) < 0.025
    assert abs(stock_kept - kept) < 0.025
    # Both choose positions uniformly: the mean chosen position is the middle.
    for outputs in (ours, stock):
        assert abs(outputs["mask_positions"][outputs["mask_weights"] == 1].mean() - 63.5) < 3


@pytest.mark.parametrize(
    "mask_token_rate, random_token_rate", [(1.0, 0.0), (0.0, 0.0), (0.0, 1.0)]
)
def test_replacement_rates_are_honoured(mask_token_rate, random_token_rate):
    token_ids = packed_batch([100] * 32, 104)
    m = masker(mask_token_rate=mask_token_rate, random_token_rate=random_token_rate)
    outputs = to_numpy(m(token_ids, seed()))
    total = 0
    for row in range(32):
        positions = chosen(outputs, row)
        new, old = outputs["token_ids"][row][positions], token_ids[row][positions]
        total += len(positions)
        if mask_token_rate == 1.0:
            assert (new == MASK).all()
        elif random_token_rate == 0.0:
            np.testing.assert_array_equal(new, old)
        else:
            assert not np.isin(new, SPECIALS).any()
            assert (new >= 5).all() and (new < VOCABULARY_SIZE).all()
    assert total == 32 * expected_count(100, 0.15, 20)
    if random_token_rate == 1.0:
        changed = outputs["token_ids"] != token_ids
        # Random ids: about 1 in 95 equals the original by chance.
        assert 0.95 * total < changed.sum() <= total
        assert len(np.unique(outputs["token_ids"][changed])) > 50


def test_same_seed_same_masks_other_seed_other_masks():
    token_ids = packed_batch([50] * 4, 64)
    m = masker()
    first = to_numpy(m(token_ids, seed(3, 4)))
    again = to_numpy(m(token_ids, seed(3, 4)))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    for other in (seed(3, 5), seed(4, 4)):
        other = to_numpy(m(token_ids, other))
        assert not np.array_equal(other["mask_positions"], first["mask_positions"])
        assert not np.array_equal(other["token_ids"], first["token_ids"])


@pytest.mark.parametrize("whole_word", [False, True])
def test_identical_rows_get_different_selections(whole_word):
    token_ids = np.repeat(packed_batch([60], 64, high=60), 4, axis=0)
    m = masker(whole_word=whole_word, continuation_ids=CONTINUATIONS)
    positions = to_numpy(m(token_ids, seed()))["mask_positions"]
    assert len({tuple(row) for row in positions.tolist()}) == 4


@pytest.mark.parametrize("whole_word", [False, True])
def test_eager_tf_function_and_tf_data_agree(whole_word):
    # The pretraining data masks in tf.data; the seeds must mean the same there.
    token_ids = tf.constant(packed_batch([10, 40, 61], 64, seed=3))
    m = masker(whole_word=whole_word, continuation_ids=CONTINUATIONS, max_predictions=8)
    eager = to_numpy(m(token_ids, seed(7, 8)))
    traced = to_numpy(tf.function(m.__call__)(token_ids, seed(7, 8)))
    for name in eager:
        np.testing.assert_array_equal(eager[name], traced[name])
    if not whole_word:  # (tracing the whole-word masker twice is slow)
        dataset = tf.data.Dataset.from_tensors(token_ids).map(lambda t: m(t, seed(7, 8)))
        in_data = to_numpy(next(iter(dataset)))
        for name in eager:
            np.testing.assert_array_equal(eager[name], in_data[name])
    assert eager["mask_weights"].sum() > 3


def words_batch(num_rows, words_per_row, sequence_length, seed=0):
    """Rows of words: a start id (5..59) and 0 to 3 "##" pieces (60..99)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_rows):
        row = [CLS]
        for _ in range(words_per_row):
            pieces = rng.integers(60, 100, size=rng.integers(0, 4)).tolist()
            row += [int(rng.integers(5, 60))] + pieces
        row.append(SEP)
        rows.append(row[:sequence_length] + [PAD] * (sequence_length - len(row)))
    return np.array(rows, np.int32)


def words_of(row):
    """Each word as its positions: a start piece and the "##" pieces after it."""
    words = []
    for position, token in enumerate(row):
        if token in CONTINUATIONS and words:
            words[-1].append(position)
        else:
            words.append([position])
    return [w for w in words if row[w[0]] not in SPECIALS]


def test_whole_word_chooses_every_piece_of_a_word():
    token_ids = words_batch(6, 22, 80)
    m = masker(whole_word=True, continuation_ids=CONTINUATIONS, mask_rate=0.2, max_predictions=80)
    outputs = to_numpy(m(token_ids, seed()))
    several_pieces = 0
    for row in range(6):
        words = words_of(token_ids[row])
        positions = set(chosen(outputs, row).tolist())
        chosen_words = [w for w in words if positions & set(w)]
        # mask_rate counts words.
        assert len(chosen_words) == expected_count(len(words), 0.2, 80)
        for word in chosen_words:
            assert set(word) <= positions
        assert positions == {p for w in chosen_words for p in w}
        several_pieces += sum(len(w) > 1 for w in chosen_words)
    assert several_pieces > 5


def test_whole_word_tokens_past_max_predictions_keep_their_ids():
    # Words of 4 pieces and room for 6 predictions: the third chosen word
    # does not fit whole.
    row = [CLS] + [t for w in range(12) for t in (5 + w, 60 + w, 70 + w, 80 + w)] + [SEP]
    token_ids = np.array([row] * 3, np.int32)
    m = masker(
        whole_word=True, continuation_ids=CONTINUATIONS, mask_rate=0.25, max_predictions=6,
        mask_token_rate=1.0, random_token_rate=0.0,
    )
    outputs = to_numpy(m(token_ids, seed()))
    for r in range(3):
        positions = outputs["mask_positions"][r]
        assert (outputs["mask_weights"][r] == 1).all()
        # Exactly the reported positions are masked; the rest of the words
        # chosen past the budget are back to their own ids.
        expected = token_ids[r].copy()
        expected[positions] = MASK
        np.testing.assert_array_equal(outputs["token_ids"][r], expected)
        np.testing.assert_array_equal(outputs["mask_ids"][r], token_ids[r][positions])
        # The first chosen words are whole (of 4 pieces each).
        starts = [p for p in positions if token_ids[r][p] < 60]
        assert all(set(range(p, p + 4)) <= set(positions.tolist()) for p in starts[:1])


def test_whole_word_masks_are_independent_across_batches():
    # Batches are numbered by the second seed number: row 1 of batch 0 must
    # not repeat row 0 of batch 1.
    token_ids = np.repeat(words_batch(1, 60, 200), 2, axis=0)
    m = masker(whole_word=True, continuation_ids=CONTINUATIONS, max_predictions=40)
    batch_0 = to_numpy(m(token_ids, seed(9, 0)))["mask_positions"]
    batch_1 = to_numpy(m(token_ids, seed(9, 1)))["mask_positions"]
    assert not np.array_equal(batch_0[1], batch_1[0])
    assert not np.array_equal(batch_0[0], batch_1[1])


def test_whole_word_row_starting_with_a_piece():
    token_ids = np.array([[61, 62, 5, 63, SEP, PAD]], np.int32)
    m = masker(whole_word=True, continuation_ids=CONTINUATIONS, mask_rate=1.0, max_predictions=6,
               mask_token_rate=1.0, random_token_rate=0.0)
    outputs = to_numpy(m(token_ids, seed()))
    np.testing.assert_array_equal(outputs["token_ids"], [[MASK, MASK, MASK, MASK, SEP, PAD]])
    np.testing.assert_array_equal(outputs["mask_positions"], [[0, 1, 2, 3, 0, 0]])


# ALBERT's n-gram masking


def ngram_masker(**kwargs):
    kwargs.setdefault("continuation_ids", CONTINUATIONS)
    kwargs.setdefault("max_ngram", 3)
    return masker(**kwargs)


def pair_of_words_batch(num_rows, sequence_length, seed=0):
    """`[CLS] words [SEP] words [SEP] [PAD]...`: words of 1 to 3 pieces, rows of varied length."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_rows):
        length = int(rng.integers(sequence_length // 3, sequence_length))
        row = [CLS]
        while len(row) < length - 2:
            if rng.random() < 0.1 and SEP not in row[1:]:
                row.append(SEP)
            if rng.random() < 0.03:
                row.append(UNK)  # an unknown word is one [UNK], without pieces
                continue
            pieces = rng.integers(60, 100, size=rng.integers(0, 3)).tolist()
            row += [int(rng.integers(5, 60))] + pieces
        row = row[: length - 1] + [SEP]
        rows.append(row + [PAD] * (sequence_length - len(row)))
    return np.array(rows, np.int32)


def test_ngram_arguments():
    with pytest.raises(ValueError, match="max_ngram=3.*continuation_ids"):
        masker(max_ngram=3)
    with pytest.raises(ValueError, match="max_ngram"):
        ngram_masker(max_ngram=0)


def test_ngram_spans_are_whole_words_of_at_most_max_ngram_and_stop_at_special_tokens():
    token_ids = pair_of_words_batch(128, 64)
    spans = ngram_masker().ngram_spans(token_ids, seed()).to_list()
    lengths = collections.Counter()
    for row, row_spans in zip(token_ids, spans):
        # The spans cover the row once, in order.
        assert [p for span in row_spans for p in span] == list(range(64))
        for span in row_spans:
            tokens = row[span]
            if np.isin(tokens, SPECIALS).any():
                assert len(span) == 1  # a special token is a span of its own
                continue
            assert tokens[0] not in CONTINUATIONS  # starts a word ...
            after = span[-1] + 1
            assert after == 64 or row[after] not in CONTINUATIONS  # ... and ends one
            words = len(words_of(list(tokens)))
            assert 1 <= words <= 3
            lengths[words] += 1
    # Spans of n words come about in proportion to 1/n (6/11, 3/11, 2/11),
    # a little shorter where a special token cuts them.
    total = sum(lengths.values())
    shares = [lengths[n] / total for n in (1, 2, 3)]
    assert total > 1500
    assert 0.52 < shares[0] < 0.64 and 0.22 < shares[1] < 0.3 and 0.12 < shares[2] < 0.2, shares


def test_ngram_masking_chooses_whole_spans_within_the_token_budget():
    token_ids = pair_of_words_batch(48, 96, seed=1)
    m = ngram_masker(mask_rate=0.15, max_predictions=20)
    outputs = to_numpy(m(token_ids, seed(4, 5)))
    spans = m.ngram_spans(token_ids, seed(4, 5)).to_list()
    chosen_tokens = budget_tokens = 0
    several_words = 0
    for row in range(len(token_ids)):
        positions = set(chosen(outputs, row).tolist())
        budget = expected_count(selectable_count(token_ids[row]), 0.15, 20)
        # mask_rate counts tokens: never above the budget, and short of it by
        # less than a span (of at most 3 words of 3 pieces).
        assert budget - 8 <= len(positions) <= budget
        chosen_spans = [span for span in spans[row] if positions & set(span)]
        for span in chosen_spans:
            assert set(span) <= positions  # whole spans only
            assert not np.isin(token_ids[row][span], SPECIALS).any()
        assert positions == {p for span in chosen_spans for p in span}
        several_words += sum(len(words_of(list(token_ids[row][s]))) > 1 for s in chosen_spans)
        chosen_tokens += len(positions)
        budget_tokens += budget
        # Only chosen tokens change.
        unchosen = np.ones(96, bool)
        unchosen[list(positions)] = False
        np.testing.assert_array_equal(outputs["token_ids"][row][unchosen], token_ids[row][unchosen])
    assert chosen_tokens > 0.9 * budget_tokens
    assert several_words > 30


def test_ngram_masking_keeps_80_10_10_and_is_seeded():
    token_ids = pair_of_words_batch(128, 128, seed=2)
    m = ngram_masker(max_predictions=20)
    first = to_numpy(m(token_ids, seed(11, 12)))
    total, mask, random, kept = replacement_shares(token_ids, first)
    assert total > 1500
    assert abs(mask - 0.8) < 0.03 and abs(random - 0.1) < 0.025 and abs(kept - 0.1) < 0.025
    again = to_numpy(tf.function(m.__call__)(token_ids, seed(11, 12)))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    other = to_numpy(m(token_ids, seed(11, 13)))
    assert not np.array_equal(other["mask_positions"], first["mask_positions"])
    # Identical rows of one batch get different spans and choices.
    same = np.repeat(token_ids[:1], 4, axis=0)
    positions = to_numpy(m(same, seed()))["mask_positions"]
    assert len({tuple(row) for row in positions.tolist()}) == 4


def test_max_ngram_one_is_the_masking_of_before():
    token_ids = words_batch(4, 20, 64)
    for whole_word in (False, True):
        plain = to_numpy(masker(whole_word=whole_word, continuation_ids=CONTINUATIONS)(token_ids, seed()))
        one = to_numpy(ngram_masker(whole_word=whole_word, max_ngram=1)(token_ids, seed()))
        for name in plain:
            np.testing.assert_array_equal(plain[name], one[name])
