import collections
import itertools
import random
import warnings

import numpy as np
import pytest

from kbert.pretraining.sentence_pair_builder import (
    IN_ORDER,
    IS_NEXT,
    NOT_NEXT,
    SWAPPED,
    SentencePairBuilder,
    resolve_objective,
)

# Document d holds the token ids d * SPAN, d * SPAN + 1, ... in reading order,
# so an id tells the document it comes from and its place there.
SPAN = 100_000


def make_corpus(num_documents, sentences, min_length=1, max_length=1, seed=0):
    rng = random.Random(seed)
    documents = []
    for d in range(num_documents):
        start, document = d * SPAN, []
        for _ in range(sentences):
            length = rng.randint(min_length, max_length)
            document.append(np.arange(start, start + length, dtype=np.int32))
            start += length
        documents.append(document)
    return documents


def document_of(ids):
    """The one document the ids come from."""
    documents = set((np.asarray(ids) // SPAN).tolist())
    assert len(documents) == 1, documents
    return documents.pop()


def is_contiguous(ids):
    return len(ids) > 0 and (np.diff(ids) == 1).all()


def all_tokens(documents):
    return [int(t) for document in documents for sentence in document for t in sentence]


def build(documents, **kwargs):
    kwargs.setdefault("seed", 0)
    builder = SentencePairBuilder(**kwargs)
    return list(builder(documents)), builder.stats


def test_sequence_length_must_leave_room_for_text():
    with pytest.raises(ValueError, match=r"\[CLS\] A \[SEP\] B \[SEP\].*at least 5"):
        SentencePairBuilder(4)
    with pytest.raises(ValueError, match=r"\[CLS\] A \[SEP\].*at least 3"):
        SentencePairBuilder(2, next_sentence=False)
    assert SentencePairBuilder(5).max_tokens == 2
    assert SentencePairBuilder(3, next_sentence=False).max_tokens == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"next_sentence_rate": 1.5}, "next_sentence_rate"),
        ({"short_sequence_rate": -0.1}, "short_sequence_rate"),
        ({"document_buffer": 0}, "document_buffer"),
        ({"sentence_order_rate": 2.0}, "sentence_order_rate"),
        ({"objective": "mlm"}, "objective.*'nsp', 'sop', 'none'"),
        ({"objective": "sop", "next_sentence": True}, "contradicts"),
        ({"objective": "nsp", "next_sentence": False}, "contradicts"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SentencePairBuilder(16, **kwargs)


@pytest.mark.parametrize("sequence_length", [5, 9, 32])
def test_every_pair_fits(sequence_length):
    documents = make_corpus(20, 15, 1, 12)
    pairs, stats = build(documents, sequence_length=sequence_length)
    assert stats.truncated > 0
    for a, b, label in pairs:
        assert a.dtype == np.int32 and b.dtype == np.int32
        assert len(a) >= 1 and len(b) >= 1
        assert len(a) + len(b) <= sequence_length - 3
        assert label in (IS_NEXT, NOT_NEXT)


def test_every_example_fits_without_next_sentence():
    documents = make_corpus(20, 15, 1, 12)
    pairs, stats = build(documents, sequence_length=16, next_sentence=False)
    assert stats.truncated > 0
    for a, b, label in pairs:
        assert 1 <= len(a) <= 14
        assert b.shape == (0,) and label == IS_NEXT
        assert is_contiguous(a)


def test_is_next_pairs_are_contiguous_stretches_of_one_document():
    documents = make_corpus(30, 20, 1, 8)
    pairs, stats = build(documents, sequence_length=32)
    max_tokens = 32 - 3
    is_next = [(a, b) for a, b, label in pairs if label == IS_NEXT]
    assert len(is_next) > 50 and stats.truncated > 0
    untruncated = 0
    for a, b in is_next:
        assert document_of(a) == document_of(b)
        assert is_contiguous(a) and is_contiguous(b)
        # B follows A in the document; truncation may trim the ends only.
        assert b[0] > a[-1]
        if len(a) + len(b) < max_tokens:  # not truncated: nothing in between
            assert b[0] == a[-1] + 1
            untruncated += 1
    assert untruncated > 10


def test_not_next_b_comes_from_another_document():
    documents = make_corpus(30, 20, 1, 8)
    pairs, _ = build(documents, sequence_length=32)
    not_next = [(a, b) for a, b, label in pairs if label == NOT_NEXT]
    assert len(not_next) > 50
    sources = set()
    for a, b in not_next:
        assert is_contiguous(a) and is_contiguous(b)
        assert document_of(b) != document_of(a)
        sources.add(document_of(b))
    # Random B segments are drawn from across the corpus.
    assert len(sources) > 20


def test_not_next_share_is_about_the_rate():
    documents = make_corpus(100, 300, 2, 4)
    pairs, stats = build(documents, sequence_length=64, seed=3)
    labels = [label for _, _, label in pairs]
    assert stats.examples == len(pairs) > 1500
    assert stats.not_next == labels.count(NOT_NEXT)
    assert stats.is_next == labels.count(IS_NEXT)
    assert 0.45 < stats.not_next / stats.examples < 0.56


@pytest.mark.parametrize("rate, expected", [(0.0, IS_NEXT), (1.0, NOT_NEXT)])
def test_next_sentence_rate_extremes(rate, expected):
    # One-token sentences, 40 per document, and chunks of 10: no chunk is a
    # single sentence, the only kind that is always NotNext.
    documents = make_corpus(10, 40)
    pairs, _ = build(
        documents, sequence_length=13, short_sequence_rate=0.0, next_sentence_rate=rate
    )
    assert pairs and {label for _, _, label in pairs} == {expected}


def test_short_sequence_rate_makes_shorter_examples():
    documents = make_corpus(40, 30, 2, 6)

    def mean_length(rate):
        pairs, _ = build(documents, sequence_length=64, short_sequence_rate=rate)
        return np.mean([len(a) + len(b) for a, b, _ in pairs])

    full, short = mean_length(0.0), mean_length(1.0)
    assert full > 50
    assert short < 0.75 * full


def test_same_seed_same_pairs_other_seed_other_pairs():
    documents = make_corpus(20, 15, 1, 9)

    def pairs(seed):
        built, _ = build(documents, sequence_length=24, seed=seed)
        return [(a.tolist(), b.tolist(), label) for a, b, label in built]

    assert pairs(7) == pairs(7)
    assert pairs(7) != pairs(8)


def test_builder_can_be_called_again_with_the_same_result():
    documents = make_corpus(10, 10, 1, 5)
    builder = SentencePairBuilder(20, seed=1)
    first = [(a.tolist(), b.tolist(), label) for a, b, label in builder(documents)]
    first_stats = builder.stats
    second = [(a.tolist(), b.tolist(), label) for a, b, label in builder(documents)]
    assert first == second
    assert builder.stats == first_stats  # counts restart with each pass


def test_without_next_sentence_every_token_appears_exactly_once():
    # Two-token sentences and an even budget: chunks never overshoot it, so
    # nothing is truncated, short targets included.
    documents = make_corpus(15, 25, 2, 2)
    pairs, stats = build(
        documents, sequence_length=22, next_sentence=False, short_sequence_rate=0.3
    )
    assert stats.truncated == 0
    assert stats.examples == len(pairs)
    tokens = [int(t) for a, _, _ in pairs for t in a]
    assert sorted(tokens) == all_tokens(documents)
    # Short targets made some examples shorter than the budget of 20.
    assert min(len(a) for a, _, _ in pairs) < 20 - 2


def test_with_next_sentence_every_sentence_is_used_once_in_a_or_is_next_b():
    # One-token sentences: chunks never overshoot the target, so nothing is
    # truncated and each id is one sentence.
    documents = make_corpus(12, 30)
    pairs, stats = build(documents, sequence_length=16)
    assert stats.truncated == 0 and stats.unpaired_segments == 0
    assert stats.is_next > 0 and stats.not_next > 0
    used = []
    for a, b, label in pairs:
        used.extend(a.tolist())
        if label == IS_NEXT:
            used.extend(b.tolist())
    assert sorted(used) == all_tokens(documents)


def test_sentences_keep_their_order_within_a_document():
    documents = make_corpus(6, 30, 1, 4)
    pairs, _ = build(documents, sequence_length=20, document_buffer=100)
    last = {}
    for a, _, _ in pairs:
        d = document_of(a)
        assert a[0] > last.get(d, -1)
        last[d] = a[-1]


def test_documents_stream_through_a_bounded_buffer():
    pulled = []

    def endless():
        for d in itertools.count():
            pulled.append(d)
            yield [np.arange(d * SPAN + 3 * s, d * SPAN + 3 * s + 3) for s in range(6)]

    builder = SentencePairBuilder(16, document_buffer=4, seed=0)
    pairs = list(itertools.islice(builder(endless()), 10))
    assert len(pairs) == 10
    # A document is taken once the buffer holds more than 4: one more is
    # read for each document taken.
    assert 5 <= len(pulled) <= 5 + 10


def test_document_buffer_shuffles_document_order():
    documents = make_corpus(30, 4, 2, 2)

    def order(buffer):
        pairs, _ = build(documents, sequence_length=64, document_buffer=buffer, next_sentence=False)
        return list(dict.fromkeys(document_of(a) for a, _, _ in pairs))

    assert sorted(order(100)) == list(range(30))
    assert order(100) != list(range(30))
    # A buffer of one document chooses among two: each document comes out
    # at most one place earlier than its turn.
    small = order(1)
    assert all(position >= d - 1 for position, d in enumerate(small))


def test_last_documents_still_find_random_partners():
    documents = make_corpus(2, 30, 2, 3)
    pairs, _ = build(documents, sequence_length=24, next_sentence_rate=1.0)
    by_document = collections.Counter(document_of(a) for a, _, _ in pairs)
    assert set(by_document) == {0, 1}
    assert all(label == NOT_NEXT and document_of(b) != document_of(a) for a, b, label in pairs)


@pytest.mark.filterwarnings("ignore:The corpus is one document")
def test_single_document_corpus_gives_no_not_next():
    documents = make_corpus(1, 50)
    pairs, stats = build(documents, sequence_length=12, short_sequence_rate=0.5)
    assert pairs and stats.not_next == 0
    assert all(label == IS_NEXT for _, _, label in pairs)
    used = sorted(int(t) for a, b, _ in pairs for t in np.concatenate([a, b]))
    # What is not used is exactly the one-sentence chunks, counted.
    assert len(all_tokens(documents)) - len(used) == stats.unpaired_segments
    assert set(used) <= set(all_tokens(documents))


def test_single_one_token_sentence_document_gives_no_pairs():
    pairs, stats = build([[np.array([5])]], sequence_length=16)
    assert pairs == []
    assert stats.examples == 0 and stats.unpaired_segments == 1


@pytest.mark.filterwarnings("ignore:The corpus is one document")
def test_a_lone_sentence_is_cut_into_a_and_the_b_that_follows():
    pairs, stats = build([[np.array([5, 6, 7, 8])]], sequence_length=16)
    [(segment_a, segment_b, label)] = pairs
    assert label == IS_NEXT and len(segment_a) >= 1 and len(segment_b) >= 1
    assert np.concatenate([segment_a, segment_b]).tolist() == [5, 6, 7, 8]
    assert stats.unpaired_segments == 0


@pytest.mark.filterwarnings("ignore:The corpus is one document")
def test_empty_documents_and_sentences_are_dropped_and_counted():
    empty = np.array([], np.int32)
    documents = [[], [empty], [np.array([1, 2]), empty, np.array([3])]]
    pairs, stats = build(documents, sequence_length=16)
    assert stats.empty_documents == 2
    assert [(a.tolist(), b.tolist(), label) for a, b, label in pairs] == [([1, 2], [3], IS_NEXT)]


def test_accepts_lists_of_ints():
    pairs, _ = build([[[5, 6], [7]], [[8, 9], [10, 11]]], sequence_length=16, next_sentence=False)
    assert sorted(t for a, _, _ in pairs for t in a.tolist()) == [5, 6, 7, 8, 9, 10, 11]


def test_a_single_document_corpus_warns_that_nsp_learns_nothing_and_how_to_fix_it():
    with pytest.warns(UserWarning, match="one document") as record:
        pairs, stats = build(make_corpus(1, 40, 2, 4), sequence_length=16)
    assert pairs and stats.documents == 1 and stats.not_next == 0
    [warning] = [w for w in record if "one document" in str(w.message)]
    message = str(warning.message)
    # Named as settings, which the `kbert` command says as its flags (--objective 'sop').
    for fix in ("`objective` 'none'", "`document_boundary` 'blank_line'", "two or more documents", "`objective` 'sop'"):
        assert fix in message, fix
    assert "--" not in message


def test_two_documents_or_masked_lm_only_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs, stats = build(make_corpus(2, 40, 2, 4), sequence_length=16)
        assert stats.documents == 2 and stats.not_next > 0
        # Empty documents do not count as a second one; without NSP one document is fine.
        _, stats = build([[], *make_corpus(1, 40, 2, 4)], sequence_length=16, next_sentence=False)
        assert stats.documents == 1 and stats.empty_documents == 1


# Sentence-order prediction (ALBERT)


def test_objective_and_the_older_next_sentence_flag():
    assert resolve_objective() == "nsp"
    assert resolve_objective(next_sentence=True) == "nsp"
    assert resolve_objective(next_sentence=False) == "none"
    assert resolve_objective("sop") == "sop"
    assert resolve_objective("none", next_sentence=False) == "none"
    assert SentencePairBuilder(16, next_sentence=False).objective == "none"
    assert SentencePairBuilder(16).objective == "nsp"
    with pytest.raises(ValueError, match=r"\[CLS\] A \[SEP\] B \[SEP\].*at least 5"):
        SentencePairBuilder(4, objective="sop")


def test_sop_pairs_are_one_documents_consecutive_segments_in_order_or_swapped():
    documents = make_corpus(30, 20, 1, 8)
    pairs, stats = build(documents, sequence_length=32, objective="sop")
    max_tokens = 32 - 3
    assert stats.examples == len(pairs) > 100 and stats.truncated > 0
    assert stats.is_next == stats.not_next == 0
    assert stats.in_order + stats.swapped == stats.examples
    untruncated = 0
    for first, second, label in pairs:
        assert label in (IN_ORDER, SWAPPED)
        # Never a segment of another document.
        assert document_of(first) == document_of(second)
        assert is_contiguous(first) and is_contiguous(second)
        # Undo the swap: A comes before B in the document.
        a, b = (first, second) if label == IN_ORDER else (second, first)
        assert b[0] > a[-1]
        if len(a) + len(b) < max_tokens:  # not truncated: B is what follows A
            assert b[0] == a[-1] + 1
            untruncated += 1
    assert untruncated > 20


def test_sop_labels_are_half_swapped_and_counted():
    documents = make_corpus(100, 300, 2, 4)
    pairs, stats = build(documents, sequence_length=64, seed=3, objective="sop")
    labels = [label for _, _, label in pairs]
    assert stats.examples == len(pairs) > 1500
    assert stats.swapped == labels.count(SWAPPED) and stats.in_order == labels.count(IN_ORDER)
    # Binomial standard error over 1,500+ pairs is below 0.013.
    assert 0.46 < stats.swapped / stats.examples < 0.54


@pytest.mark.parametrize("rate, expected", [(0.0, IN_ORDER), (1.0, SWAPPED)])
def test_sentence_order_rate_extremes(rate, expected):
    pairs, _ = build(make_corpus(10, 40, 1, 3), sequence_length=13, objective="sop",
                     sentence_order_rate=rate)
    assert pairs and {label for _, _, label in pairs} == {expected}


def test_sop_uses_every_sentence_once_and_a_single_document_is_fine():
    # One-token sentences: nothing truncated; one document, so no warning.
    documents = make_corpus(1, 60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs, stats = build(documents, sequence_length=16, objective="sop", short_sequence_rate=0.3)
    assert stats.truncated == 0 and stats.documents == 1
    assert stats.in_order > 0 and stats.swapped > 0
    used = sorted(int(t) for a, b, _ in pairs for t in np.concatenate([a, b]))
    # Only single-sentence chunks of one token (no second segment) are left out.
    assert len(all_tokens(documents)) - len(used) == stats.unpaired_segments
    assert set(used) <= set(all_tokens(documents))


def test_sop_cuts_a_lone_sentence_in_two():
    pairs, stats = build([[np.array([5, 6, 7, 8])]], sequence_length=16, objective="sop")
    [(first, second, label)] = pairs
    a, b = (first, second) if label == IN_ORDER else (second, first)
    assert np.concatenate([a, b]).tolist() == [5, 6, 7, 8] and stats.unpaired_segments == 0


def test_sop_same_seed_same_pairs_other_seed_other_pairs():
    documents = make_corpus(20, 15, 1, 9)

    def pairs(seed):
        built, _ = build(documents, sequence_length=24, seed=seed, objective="sop")
        return [(a.tolist(), b.tolist(), label) for a, b, label in built]

    assert pairs(7) == pairs(7)
    assert pairs(7) != pairs(8)
