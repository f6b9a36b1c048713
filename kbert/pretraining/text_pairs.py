"""Text files to segment pairs, streamed: documents, sentences, tokens, then `SentencePairBuilder`."""

import dataclasses

import numpy as np
import tensorflow as tf

from kbert.preprocessing.tokenizer import Tokenizer
from kbert.pretraining.corpus_progress import count_pairs
from kbert.pretraining.documents import CorpusStats, corpus_files, read_documents

# Sentences tokenized per TF call: large enough to amortise the call.
_SENTENCES_PER_CALL = 4096
# Pairs cross from Python to tf.data in chunks: one crossing per pair costs
# more than making the pair.
_PAIRS_PER_CHUNK = 256
_CHUNK_SPEC = tuple(
    tf.TensorSpec([None], tf.int32, name=name)
    for name in ("a_values", "a_lengths", "b_values", "b_lengths", "labels")
)


def corpus_tokenizer(vocabulary, tokenizer, lowercase):
    """`tokenizer`, or a `Tokenizer` of `vocabulary` that reads corpus text."""
    if tokenizer is not None:
        return tokenizer
    if vocabulary is None:
        raise ValueError("Pass `vocabulary` (a list of tokens or a vocab.txt path) or `tokenizer`.")
    # Corpus text is data: a literal "[MASK]" in it is not the mask token.
    return Tokenizer(vocabulary, lowercase=lowercase, special_tokens_in_strings=False)


class TextPairs:
    """Segment pairs from text files, produced in Python, streaming.

    Each call is a new pass over the files; `corpus_stats` and the builder's
    `stats` count the pass running or last run. `settings` (seed set) take
    the length and objective of the pairs where they leave them unset.
    """

    def __init__(self, corpus, tokenizer, settings):
        self.files = corpus_files(corpus)
        self.tokenizer = tokenizer
        self.builder = settings.pair_builder()
        self.settings = dataclasses.replace(settings, sequence_length=self.builder.sequence_length,
                                            objective=self.builder.objective, next_sentence=None)
        self.document_boundary = settings.document_boundary
        self.corpus_stats = CorpusStats()

    def __call__(self):
        """Yields `(segment_a, segment_b, label)` for each pair."""
        self.corpus_stats = CorpusStats()
        documents = read_documents(self.files, self.document_boundary, self.corpus_stats)
        yield from self.builder(self._tokenized(documents))

    def count_examples(self, verbose):
        """One pass over the pairs to count them (see `count_pairs`)."""
        return count_pairs(self, verbose)

    def dataset(self, worker=0, workers=1):
        """One pass of the pairs as `tf.data`: ragged `segment_a`, `segment_b` and the label.

        Text is split among workers by data, not here: every worker reads all of it.
        """
        chunks = tf.data.Dataset.from_generator(self._chunks, output_signature=_CHUNK_SPEC)
        return chunks.flat_map(_unflatten_chunk)

    def summary(self):
        """What the last pass read, gave and skipped, in one line."""
        stats, pairs = self.corpus_stats, self.builder.stats
        line = (
            f"{stats.files:,} file(s), {stats.documents:,} documents, {stats.sentences:,} sentences "
            f"-> {pairs.examples:,} examples"
        )
        if self.builder.objective == "nsp" and pairs.examples:
            line += f" ({100 * pairs.not_next / pairs.examples:.1f} % NotNext)"
        elif self.builder.objective == "sop" and pairs.examples:
            line += f" ({100 * pairs.swapped / pairs.examples:.1f} % swapped)"
        skipped = [stats.skipped_summary()] if stats.skipped_summary() else []
        if pairs.unpaired_segments:
            skipped.append(
                f"{pairs.unpaired_segments:,} one-token chunk(s) with no other document to pair with"
            )
        if pairs.empty_documents:
            skipped.append(f"{pairs.empty_documents:,} document(s) with no tokens")
        return line + ("; " + "; ".join(skipped) if skipped else "")

    def _chunks(self):
        """Yields the pairs in chunks, as flat arrays (see `_CHUNK_SPEC`)."""
        chunk = []
        for pair in self():
            chunk.append(pair)
            if len(chunk) == _PAIRS_PER_CHUNK:
                yield _flatten_chunk(chunk)
                chunk = []
        if chunk:
            yield _flatten_chunk(chunk)

    def _tokenized(self, documents):
        group, sentences = [], 0
        for document in documents:
            group.append(document)
            sentences += len(document)
            if sentences >= _SENTENCES_PER_CALL:
                yield from self._tokenize_group(group)
                group, sentences = [], 0
        if group:
            yield from self._tokenize_group(group)

    def _tokenize_group(self, group):
        ids = self.tokenizer([s for document in group for s in document])
        values, splits = ids.flat_values.numpy(), ids.row_splits.numpy()
        sentence = 0
        for document in group:
            yield [values[splits[i] : splits[i + 1]] for i in range(sentence, sentence + len(document))]
            sentence += len(document)


def _flatten_chunk(pairs):
    segments_a, segments_b, labels = zip(*pairs)
    return (
        np.concatenate(segments_a),
        np.array([len(a) for a in segments_a], np.int32),
        np.concatenate(segments_b),
        np.array([len(b) for b in segments_b], np.int32),
        np.array(labels, np.int32),
    )


def _unflatten_chunk(a_values, a_lengths, b_values, b_lengths, labels):
    return tf.data.Dataset.from_tensor_slices(
        (
            tf.RaggedTensor.from_row_lengths(a_values, a_lengths),
            tf.RaggedTensor.from_row_lengths(b_values, b_lengths),
            labels,
        )
    )
