"""BERT's and ALBERT's pretraining data: raw documents to masked-LM and NSP or SOP examples.

Two ways in, same examples for the same seed:

- `pretraining_dataset(["corpus/*.txt"], ...)` streams text files: documents
  to sentences, tokens, segment pairs, then masking in `tf.data`;
- `prepare_pretraining_data(...)` (`kbert prepare-pretraining`) writes the
  segment pairs once to sharded TFRecords, and `pretraining_dataset(folder)`
  reads them, for corpora too large to tokenize again every epoch.

Masks are drawn anew each epoch (dynamic masking) from stateless seeds made
of `seed`, the epoch and the batch's number, so a run, its TFRecord twin
and a run resumed from a backup see exactly the same examples.
"""

import dataclasses

import numpy as np

from kbert.backend.distribute import agreed_seed, is_multi_worker
from kbert.pretraining.prepared_pairs import (
    FORMAT,
    METADATA_FILE,
    VOCABULARY_FILE,
    PreparedPairs,
    prepare_pretraining_data,
    prepared_folder,
    prepared_objective,
    read_metadata,
    shard_sizes,
)
from kbert.pretraining.pretraining_batches import EpochCounter, ExampleMaker, pretraining_batches
from kbert.pretraining.pretraining_settings import PretrainingSettings
from kbert.pretraining.text_pairs import TextPairs, corpus_tokenizer

# The names this module has always offered; most are defined beside it.
__all__ = [
    "FORMAT",
    "METADATA_FILE",
    "VOCABULARY_FILE",
    "EpochCounter",
    "prepare_pretraining_data",
    "prepared_folder",
    "prepared_objective",
    "pretraining_dataset",
    "read_metadata",
    "shard_sizes",
]


def pretraining_dataset(corpus, vocabulary=None, settings=None, *, tokenizer=None, **options):
    """Masked-LM and next-sentence (or sentence-order) examples from raw text, as a `kbert.PretrainingData`.

    Text files are read as documents (by default each file is one), split
    into sentences and tokenized; `SentencePairBuilder` cuts them into
    segment pairs (NSP: B follows A, or comes from another document, half
    the time each; SOP: A and the B that follows it, in order or swapped,
    half the time each); each pair is packed as `[CLS] A [SEP] B [SEP]` and
    `MaskedLMMasker` picks and corrupts `mask_rate` of its tokens (80 %
    `[MASK]`, 10 % random, 10 % unchanged), one by one, as whole words, or
    as ALBERT's n-grams of up to `max_ngram` words.

    The dataset yields batches `(x, y, sample_weight)` for
    `kbert.Pretrainer.fit`: `x` has `token_ids`, `segment_ids`,
    `padding_mask` (`[batch, sequence_length]`) and `mask_positions`
    (`[batch, max_predictions]`); `y` has `mlm` (the original tokens at those
    positions) and `nsp` (0 IsNext, 1 NotNext) or, with `objective="sop"`,
    `sop` (0 in order, 1 swapped); `sample_weight` has `mlm` (1.0 on real
    predictions, 0.0 on padding) and `nsp` or `sop` (ones). With
    `objective="none"` there is only `mlm` and each example is one segment.
    The `kbert.PretrainingData` returned is that `tf.data.Dataset`, and
    carries its `objective`, `num_examples` and the `stream` a resumed
    `Pretrainer.fit` reads.

    Each pass is one epoch of every pair; pairs are reshuffled and masked
    anew every epoch. Files are streamed, so memory stays flat however large
    the corpus. With `count_examples` one pass is made up front to count
    the examples (so Keras knows the epoch length and the learning-rate
    schedule its total) and to report what was read and skipped; for a huge
    corpus, pass `count_examples=False` and give `fit` a `steps_per_epoch`,
    or prepare TFRecords once with `prepare_pretraining_data`.

    Args:
        corpus: text files: paths, folders or glob patterns (each must match);
            or a folder written by `prepare_pretraining_data`.
        vocabulary: a list of tokens or a `vocab.txt` path (not needed for a
            prepared folder, which holds its own).
        settings: a `kbert.PretrainingSettings` holding the options below
            (all but `tokenizer`), instead of the keywords; a keyword given
            as well must agree with it.
        sequence_length: packed length, special tokens included (128, or the
            prepared folder's).
        batch_size: examples per batch.
        mask_rate, mask_token_rate, random_token_rate: share of tokens to
            predict; of those, shares replaced by `[MASK]` and by a random
            token (the rest stay).
        max_predictions: masked positions per example; default
            `ceil(sequence_length * mask_rate)` (20 for 128 tokens).
        next_sentence: the older switch of the objective: `True` is
            `objective="nsp"`, `False` is `objective="none"`.
        whole_word_masking: mask all pieces of a word together.
        next_sentence_rate, short_sequence_rate: share of random B segments
            (NSP), and of shorter examples (BERT's recipe: 0.5 and 0.1).
        document_boundary: `"file"` (each file is a document) or
            `"blank_line"` (BERT's format: blank lines end documents); see
            `kbert.pretraining.documents.read_documents`.
        document_buffer: documents held to shuffle and draw random B from.
        shuffle_buffer: examples shuffled across per epoch (0: no shuffle).
        seed: fixes pairs, order and masks; random when `None`.
        tokenizer: a tokenizer with `kbert.Tokenizer`'s interface (ids of
            the special tokens, `get_vocabulary`, `continuation_ids`),
            instead of `vocabulary`.
        lowercase: for the tokenizer made from `vocabulary`.
        count_examples: count the examples first (see above).
        verbose: show the counting pass's progress (files, documents,
            pairs) on stderr, then what the corpus gave and what was skipped.
        objective: `"nsp"` (next-sentence prediction, BERT's; the default),
            `"sop"` (sentence-order prediction, ALBERT's) or `"none"`
            (masked LM only). A prepared folder keeps the objective it was
            written for; asking for another is an error.
        sentence_order_rate: share of SOP pairs that are swapped.
        max_ngram: mask spans of up to this many whole words (ALBERT's
            n-gram masking uses 3; see `MaskedLMMasker`). 1 masks tokens (or
            words, with `whole_word_masking`) one by one.

    Example (`folder` is any writable directory):
    >>> with open(os.path.join(folder, "cats.txt"), "w") as file:
    ...     _ = file.write("The cat sat on the mat. It was warm. The cat slept.")
    >>> with open(os.path.join(folder, "dogs.txt"), "w") as file:
    ...     _ = file.write("A dog ran in the park. It barked. The dog was happy.")
    >>> corpus = [os.path.join(folder, "*.txt")]
    >>> vocab = kbert.learn_vocabulary(corpus, vocabulary_size=60, verbose=False)
    >>> data = kbert.pretraining_dataset(corpus, vocabulary=vocab, sequence_length=16,
    ...                                  batch_size=2, seed=0, verbose=False)
    >>> x, y, sample_weight = next(iter(data))
    >>> x["token_ids"].shape, x["mask_positions"].shape, y["mlm"].shape, y["nsp"].shape
    (TensorShape([2, 16]), TensorShape([2, 3]), TensorShape([2, 3]), TensorShape([2]))
    >>> data.objective
    'nsp'
    >>> pretrainer = kbert.Pretrainer(kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab)))
    >>> history = pretrainer.fit(data, epochs=1, verbose=0)
    """
    settings = PretrainingSettings.from_arguments(settings, **options)
    settings = dataclasses.replace(settings, seed=_drawn_seed() if settings.seed is None else int(settings.seed))
    folder = prepared_folder(corpus)
    if folder is not None:
        source = PreparedPairs(folder, settings, vocabulary, tokenizer)
    else:
        source = TextPairs(corpus, corpus_tokenizer(vocabulary, tokenizer, settings.lowercase), settings)
    settings = source.settings  # the sequence length and objective of the pairs
    # Made before the pass that counts the examples, so that bad masking options fail at once.
    example_maker = ExampleMaker(source.tokenizer, settings)
    num_examples = source.count_examples(settings.verbose) if settings.count_examples else None
    return pretraining_batches(source.dataset, example_maker, settings, num_examples, folder)

def _drawn_seed():
    """A random seed, the same on every worker of a multi-worker run (they must read the same pairs)."""
    if is_multi_worker():
        return agreed_seed() % 2**31
    return int(np.random.default_rng().integers(2**31))
