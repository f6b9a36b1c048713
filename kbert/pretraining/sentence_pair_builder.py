"""Documents of tokenized sentences to the segment pairs of BERT's and ALBERT's pretraining."""

import collections
import dataclasses
import random
import warnings

import numpy as np

IS_NEXT, NOT_NEXT = 0, 1
# Sentence-order prediction labels: the two segments in the text's order, or swapped.
IN_ORDER, SWAPPED = 0, 1

# Pair objectives: next-sentence prediction (BERT), sentence-order
# prediction (ALBERT), or none (single segments, masked LM only).
OBJECTIVES = ("nsp", "sop", "none")


def resolve_objective(objective=None, next_sentence=None):
    """The pair objective of `objective` and the older `next_sentence` flag.

    `next_sentence=True` means `"nsp"` and `False` means `"none"`; with
    neither given the objective is `"nsp"`. Both may be given when they agree.
    """
    if objective is None:
        return "none" if next_sentence is not None and not next_sentence else "nsp"
    if objective not in OBJECTIVES:
        raise ValueError(f"`objective` must be one of {OBJECTIVES}, got {objective!r}.")
    if next_sentence is not None and ("nsp" if next_sentence else "none") != objective:
        raise ValueError(
            f"`next_sentence={next_sentence}` contradicts `objective={objective!r}`; "
            "pass `objective` only."
        )
    return objective


SINGLE_DOCUMENT_WARNING = (
    "The corpus is one document, so next-sentence prediction gets no NotNext pairs (a random B "
    "comes from another document): every pair is IsNext, 0 % NotNext, and NSP accuracy is 1.0 "
    "without learning anything. Give the corpus two or more documents (several files, or "
    "`document_boundary` 'blank_line' with a blank line between documents), pretrain with "
    "sentence-order prediction, which pairs segments of one document (`objective` 'sop'), or "
    "pretrain masked LM only (`objective` 'none')."
)


@dataclasses.dataclass
class PairStats:
    """Counts of one pass: documents read, examples made, their labels, and what was left out."""

    documents: int = 0
    examples: int = 0
    is_next: int = 0
    not_next: int = 0
    truncated: int = 0
    empty_documents: int = 0
    unpaired_segments: int = 0
    in_order: int = 0
    swapped: int = 0


class SentencePairBuilder:
    """Cuts documents into the segment pairs BERT (NSP) or ALBERT (SOP) pretrains on.

    Follows the recipe of the BERT paper and its reference data script.
    Sentences of a document are gathered into a chunk until the chunk
    reaches the target length (`sequence_length - 3` tokens, leaving room
    for `[CLS]` and two `[SEP]`; with probability `short_sequence_rate` a
    random shorter target, so the model also sees short inputs). The chunk is
    cut at a random sentence boundary into segment A and segment B:

    - with probability `1 - next_sentence_rate`, B is the rest of the chunk,
      the text that really follows A (label 0, IsNext);
    - otherwise B is a random stretch of another document (label 1,
      NotNext), and the sentences of the chunk not used go back to be read
      again.

    A chunk of a single sentence (a long one, or a document's last) is cut
    inside the sentence when B must follow A: a segment is any span of text,
    as the paper's footnote says. (The reference script always gives such a
    chunk a random B, so its NotNext share rises above one half wherever
    sentences are long.)

    A random B needs a second document: a corpus of one document gives only
    IsNext pairs, on which next-sentence prediction learns nothing (its
    accuracy is 1.0 from the start), so the builder warns, naming the fixes.

    With `objective="sop"` (ALBERT's sentence-order prediction) the chunk is
    cut the same way, and B is always the rest of the chunk: with
    probability `1 - sentence_order_rate` the pair keeps the text's order
    (label 0, in order), otherwise A and B are swapped (label 1, swapped).
    Both segments always come from one document, so a corpus of one
    document is fine. A chunk of one sentence is cut inside it; a chunk of
    one one-token sentence cannot be cut and is left out (counted in
    `stats.unpaired_segments`).

    A pair that is still too long loses tokens from the longer segment, at
    its front or back at random. With `objective="none"` (or the older
    `next_sentence=False`) each chunk is one segment of up to
    `sequence_length - 2` tokens (the MLM-only ablation).

    Documents stream through: a buffer of `document_buffer` documents both
    shuffles their order and is the pool the random B segments come from,
    so memory does not grow with the corpus. The same documents and seed
    give the same pairs.

    Args:
        sequence_length: the packed length, special tokens included.
        next_sentence: the older switch: `True` is `objective="nsp"`,
            `False` is `objective="none"`.
        next_sentence_rate: share of NSP pairs whose B is random (NotNext).
        short_sequence_rate: share of chunks with a shorter random target.
        document_buffer: documents held for shuffling and random B segments.
        seed: seed of the pair choices.
        objective: `"nsp"` (the default), `"sop"` or `"none"`.
        sentence_order_rate: share of SOP pairs that are swapped.

    Example:
    >>> builder = SentencePairBuilder(sequence_length=16, seed=0)
    >>> document = [np.array([5, 6, 7]), np.array([8, 9]), np.array([10, 11, 12])]
    >>> other = [np.array([20, 21]), np.array([22, 23, 24])]
    >>> pairs = list(builder([document, other]))
    >>> sorted({label for _, _, label in pairs}) <= [0, 1]
    True
    >>> sop = SentencePairBuilder(sequence_length=16, objective="sop", seed=0)
    >>> [(a.tolist(), b.tolist(), label) for a, b, label in sop([document])]  # 1: swapped
    [([10, 11, 12], [5, 6, 7, 8, 9], 1)]
    """

    def __init__(
        self,
        sequence_length,
        next_sentence=None,
        next_sentence_rate=0.5,
        short_sequence_rate=0.1,
        document_buffer=100,
        seed=0,
        objective=None,
        sentence_order_rate=0.5,
    ):
        objective = resolve_objective(objective, next_sentence)
        pairs = objective != "none"
        minimum = 5 if pairs else 3
        if int(sequence_length) < minimum:
            raise ValueError(
                f"`sequence_length` {sequence_length} leaves no room for text: "
                f"{'[CLS] A [SEP] B [SEP]' if pairs else '[CLS] A [SEP]'} "
                f"needs at least {minimum}."
            )
        for name, rate in (
            ("next_sentence_rate", next_sentence_rate),
            ("short_sequence_rate", short_sequence_rate),
            ("sentence_order_rate", sentence_order_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"`{name}` must be in [0, 1], got {rate}.")
        if int(document_buffer) < 1:
            raise ValueError(f"`document_buffer` must be at least 1, got {document_buffer}.")
        self.sequence_length = int(sequence_length)
        self.objective = objective
        # Whether examples are segment pairs (NSP or SOP) rather than single segments.
        self.pairs = pairs
        self.next_sentence = objective == "nsp"
        self.next_sentence_rate = float(next_sentence_rate)
        self.sentence_order_rate = float(sentence_order_rate)
        self.short_sequence_rate = float(short_sequence_rate)
        self.document_buffer = int(document_buffer)
        self.seed = int(seed)
        self.max_tokens = self.sequence_length - (3 if pairs else 2)
        self.stats = PairStats()

    def __call__(self, documents):
        """Yields `(segment_a, segment_b, label)`; B is empty and the label 0 without pairs.

        Args:
            documents: an iterable of documents, each a list of 1-D integer
                arrays (the token ids of its sentences).
        """
        self.stats = PairStats()
        rng = random.Random(self.seed)
        pending = []
        # Documents already used stay available as random B segments, so the
        # last documents of the corpus still find partners.
        used = collections.deque(maxlen=self.document_buffer)
        for document in documents:
            document = [np.asarray(s, dtype=np.int32) for s in document if len(s)]
            if not document:
                self.stats.empty_documents += 1
                continue
            self.stats.documents += 1
            pending.append(document)
            if len(pending) > self.document_buffer:
                yield from self._take_one(pending, used, rng)
        while pending:
            yield from self._take_one(pending, used, rng)
        # Only with examples: a corpus that gives none is an error elsewhere.
        if self.next_sentence and self.stats.documents == 1 and self.stats.examples:
            warnings.warn(SINGLE_DOCUMENT_WARNING, UserWarning, stacklevel=2)

    def _take_one(self, pending, used, rng):
        document = pending.pop(rng.randrange(len(pending)))
        yield from self._document_pairs(document, pending, used, rng)
        used.append(document)

    def _target_length(self, rng):
        if rng.random() < self.short_sequence_rate:
            return rng.randint(2, self.max_tokens)
        return self.max_tokens

    def _document_pairs(self, document, pending, used, rng):
        target = self._target_length(rng)
        chunk, length, i = [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                if self.objective == "nsp":
                    pair, unused = self._pair(chunk, target, pending, used, rng)
                    i -= unused
                    if pair is not None:
                        yield pair
                elif self.objective == "sop":
                    pair = self._ordered_pair(chunk, rng)
                    if pair is not None:
                        yield pair
                else:
                    yield self._single(chunk)
                chunk, length = [], 0
                target = self._target_length(rng)
            i += 1

    def _single(self, chunk):
        tokens = np.concatenate(chunk)
        if len(tokens) > self.max_tokens:
            tokens = tokens[: self.max_tokens]
            self.stats.truncated += 1
        self.stats.examples += 1
        return tokens, np.zeros([0], np.int32), IS_NEXT

    def _pair(self, chunk, target, pending, used, rng):
        """Returns `((a, b, label) or None, sentences to read again)`."""
        split = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
        segment_a = np.concatenate(chunk[:split])
        has_other = bool(pending) or bool(used)
        # One sentence of one token has no continuation inside the chunk.
        can_continue = len(chunk) >= 2 or len(chunk[0]) >= 2
        random_next = rng.random() < self.next_sentence_rate
        unused = 0
        if has_other and (random_next or not can_continue):
            segment_b = self._random_segment(target - len(segment_a), pending, used, rng)
            label = NOT_NEXT
            unused = len(chunk) - split
        elif len(chunk) >= 2:
            segment_b = np.concatenate(chunk[split:])
            label = IS_NEXT
        elif can_continue:
            # A segment is any span of text (the paper's footnote), so one
            # long sentence is cut in two: A and the B that really follows.
            cut = rng.randint(1, len(chunk[0]) - 1)
            segment_a, segment_b = chunk[0][:cut], chunk[0][cut:]
            label = IS_NEXT
        else:
            # One one-token sentence and no other document to pair it with.
            self.stats.unpaired_segments += 1
            return None, 0
        segment_a, segment_b = self._truncate(segment_a, segment_b, rng)
        self.stats.examples += 1
        if label == IS_NEXT:
            self.stats.is_next += 1
        else:
            self.stats.not_next += 1
        return (segment_a, segment_b, label), unused

    def _ordered_pair(self, chunk, rng):
        """An SOP pair of the chunk: A and the B that follows it, kept in order or swapped."""
        if len(chunk) >= 2:
            split = rng.randint(1, len(chunk) - 1)
            segment_a, segment_b = np.concatenate(chunk[:split]), np.concatenate(chunk[split:])
        elif len(chunk[0]) >= 2:
            # One sentence: cut inside it (a segment is any span of text).
            cut = rng.randint(1, len(chunk[0]) - 1)
            segment_a, segment_b = chunk[0][:cut], chunk[0][cut:]
        else:
            # One one-token sentence has no second segment.
            self.stats.unpaired_segments += 1
            return None
        segment_a, segment_b = self._truncate(segment_a, segment_b, rng)
        self.stats.examples += 1
        if rng.random() < self.sentence_order_rate:
            self.stats.swapped += 1
            return segment_b, segment_a, SWAPPED
        self.stats.in_order += 1
        return segment_a, segment_b, IN_ORDER

    def _random_segment(self, target_length, pending, used, rng):
        index = rng.randrange(len(pending) + len(used))
        other = pending[index] if index < len(pending) else used[index - len(pending)]
        start = rng.randrange(len(other))
        pieces, length = [], 0
        for sentence in other[start:]:
            pieces.append(sentence)
            length += len(sentence)
            if length >= target_length:
                break
        return np.concatenate(pieces)

    def _truncate(self, segment_a, segment_b, rng):
        excess = len(segment_a) + len(segment_b) - self.max_tokens
        if excess <= 0:
            return segment_a, segment_b
        self.stats.truncated += 1
        # Bounds [start, end) of each segment; trimmed one token at a time from
        # the longer one (B on a tie), at a random end, as the reference does.
        bounds = [[0, len(segment_a)], [0, len(segment_b)]]
        for _ in range(excess):
            longer = bounds[0] if bounds[0][1] - bounds[0][0] > bounds[1][1] - bounds[1][0] else bounds[1]
            if rng.random() < 0.5:
                longer[0] += 1
            else:
                longer[1] -= 1
        return segment_a[slice(*bounds[0])], segment_b[slice(*bounds[1])]
