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

import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from kbert.atomic_files import contains_path, make_folder_beside
from kbert.data.documents import CorpusStats, corpus_files, read_documents
from kbert.distribute import agreed_seed, is_multi_worker
from kbert.preprocessing.masked_lm_masker import MaskedLMMasker, default_max_predictions
from kbert.preprocessing.sentence_pair_builder import SentencePairBuilder, resolve_objective
from kbert.preprocessing.tokenizer import Tokenizer, read_vocabulary

METADATA_FILE = "metadata.json"
VOCABULARY_FILE = "vocab.txt"
FORMAT = "kbert-pretraining-pairs/1"
_SHARD_NAME = re.compile(r"pairs-[0-9]{5,}\.tfrecord")
# Sentences tokenized per TF call: large enough to amortise the call.
_SENTENCES_PER_CALL = 4096
# Pairs cross from Python to tf.data in chunks: one crossing per pair costs
# more than making the pair.
_PAIRS_PER_CHUNK = 256
_CHUNK_SPEC = tuple(
    tf.TensorSpec([None], tf.int32, name=name)
    for name in ("a_values", "a_lengths", "b_values", "b_lengths", "labels")
)


class EpochCounter:
    """Numbers the passes over a dataset; each new iterator takes the next one.

    So each epoch of a plain `fit(dataset, epochs=...)` draws new masks.
    (`Pretrainer.fit` numbers its passes in the graph instead; see
    `pretraining_dataset`'s `kbert_stream`.)
    """

    def __init__(self):
        self.next_epoch = 0

    def __call__(self):
        epoch = self.next_epoch
        self.next_epoch += 1
        yield epoch


class _TextPairs:
    """Segment pairs from text files, produced in Python, streaming."""

    def __init__(self, files, tokenizer, builder, document_boundary):
        self.files = files
        self.tokenizer = tokenizer
        self.builder = builder
        self.document_boundary = document_boundary
        self.corpus_stats = CorpusStats()

    def __call__(self):
        """Yields `(segment_a, segment_b, label)` for each pair."""
        self.corpus_stats = CorpusStats()
        documents = read_documents(self.files, self.document_boundary, self.corpus_stats)
        yield from self.builder(self._tokenized(documents))

    def chunks(self):
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

    def summary(self):
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


def _make_tokenizer(vocabulary, tokenizer, lowercase):
    if tokenizer is not None:
        return tokenizer
    if vocabulary is None:
        raise ValueError("Pass `vocabulary` (a list of tokens or a vocab.txt path) or `tokenizer`.")
    # Corpus text is data: a literal "[MASK]" in it is not the mask token.
    return Tokenizer(vocabulary, lowercase=lowercase, special_tokens_in_strings=False)


def _text_source(corpus, tokenizer, sequence_length, objective, next_sentence_rate,
                 sentence_order_rate, short_sequence_rate, document_boundary, document_buffer, seed):
    builder = SentencePairBuilder(
        sequence_length,
        objective=objective,
        next_sentence_rate=next_sentence_rate,
        sentence_order_rate=sentence_order_rate,
        short_sequence_rate=short_sequence_rate,
        document_buffer=document_buffer,
        seed=seed,
    )
    return _TextPairs(corpus_files(corpus), tokenizer, builder, document_boundary)


class _Progress:
    """Counts of a long pass over a corpus, shown while it runs (on stderr).

    On a terminal one line is rewritten in place (a carriage return, no
    escape codes) a few times a second; elsewhere (a log file, a pipe) plain
    lines come every `_PLAIN_INTERVAL` seconds and whenever `show` is forced,
    so a log holds no control characters. `finish` ends with a last line.
    """

    def __init__(self, describe, verbose=True, stream=None):
        self.describe = describe  # () -> the line of counts
        self.verbose = verbose
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self.start = self.last = time.monotonic()
        self.width = 0

    def show(self, force=False):
        if not self.verbose:
            return
        now = time.monotonic()
        if not force and now - self.last < (_TERMINAL_INTERVAL if self.terminal else _PLAIN_INTERVAL):
            return
        self.last = now
        line = f"{self.describe()} ({now - self.start:.0f} s)"
        if self.terminal:
            # Spaces cover the end of a longer line written before.
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self):
        if not self.verbose:
            return
        self.show(force=True)
        if self.terminal:
            self.stream.write("\n")
            self.stream.flush()


# Seconds between progress lines: rewritten on a terminal, appended elsewhere.
_TERMINAL_INTERVAL = 0.2
_PLAIN_INTERVAL = 10.0


def _reading(source, pairs, shards=None):
    """The progress line of a pass: files, documents, pairs (and shards)."""
    stats = source.corpus_stats
    line = (f"Reading the corpus: {stats.files:,}/{len(source.files):,} file(s), "
            f"{stats.documents:,} documents, {pairs:,} pairs")
    return line + (f", {shards:,} shard(s)" if shards is not None else "")


def _count(source, verbose):
    """One pass over the pairs: their number, and errors raised here, not in tf.data."""
    count = 0
    progress = _Progress(lambda: _reading(source, count), verbose)
    for _ in source():
        count += 1
        progress.show()
    progress.finish()
    if verbose:
        print(f"Pretraining corpus: {source.summary()}", file=sys.stderr, flush=True)
    if count == 0:
        raise ValueError(f"The corpus gives no pretraining examples: {source.summary()}.")
    return count


def prepared_folder(corpus):
    """The folder of `prepare_pretraining_data` that `corpus` names (alone or as a list of one), or `None`."""
    if isinstance(corpus, (list, tuple)) and len(corpus) == 1:
        corpus = corpus[0]
    if isinstance(corpus, (str, os.PathLike)) and (Path(corpus) / METADATA_FILE).is_file():
        return corpus
    return None


def prepared_objective(metadata):
    """The pair objective a prepared folder was written for (older folders say `next_sentence`)."""
    return metadata.get("objective", "nsp" if metadata["next_sentence"] else "none")


def read_metadata(folder):
    """The `metadata.json` of a prepared folder, checked to be kbert's."""
    path = Path(folder) / METADATA_FILE
    metadata = json.loads(path.read_text())
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        found = metadata.get("format") if isinstance(metadata, dict) else None
        raise ValueError(f"{path} is not kbert pretraining data (format {found!r}).")
    # Shards are read from the folder itself, never from a path named in the file.
    bad = [name for name in metadata.get("shards", ()) if not (isinstance(name, str) and _SHARD_NAME.fullmatch(name))]
    if bad:
        raise ValueError(f"{path}: the shard {bad[0]!r} is not a shard file name of the folder "
                         "(pairs-NNNNN.tfrecord).")
    return metadata


def pretraining_dataset(
    corpus,
    vocabulary=None,
    sequence_length=None,
    batch_size=32,
    mask_rate=0.15,
    mask_token_rate=0.8,
    random_token_rate=0.1,
    max_predictions=None,
    next_sentence=None,
    whole_word_masking=False,
    next_sentence_rate=0.5,
    short_sequence_rate=0.1,
    document_boundary="file",
    document_buffer=100,
    shuffle_buffer=10000,
    seed=None,
    tokenizer=None,
    lowercase=True,
    count_examples=True,
    verbose=True,
    objective=None,
    sentence_order_rate=0.5,
    max_ngram=1,
):
    """Masked-LM and next-sentence (or sentence-order) examples from raw text, as a `tf.data.Dataset`.

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
    The dataset's `kbert_objective` attribute names its objective.

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
            `kbert.data.documents.read_documents`.
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
    >>> pretrainer = kbert.Pretrainer(kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab)))
    >>> history = pretrainer.fit(data, epochs=1, verbose=0)
    """
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
        if is_multi_worker():
            seed = agreed_seed() % 2**31  # every worker must read the same pairs
    seed = int(seed)
    if int(batch_size) < 1:
        raise ValueError(f"`batch_size` must be at least 1, got {batch_size}.")

    requested = None
    if objective is not None or next_sentence is not None:
        requested = resolve_objective(objective, next_sentence)
    if prepared_folder(corpus) is not None:
        corpus = prepared_folder(corpus)
        metadata = read_metadata(corpus)
        prepared_vocabulary = read_vocabulary(str(Path(corpus) / VOCABULARY_FILE))
        if vocabulary is not None and read_vocabulary(vocabulary) != prepared_vocabulary:
            raise ValueError(f"`vocabulary` differs from the one {corpus} was prepared with.")
        if tokenizer is not None and tokenizer.get_vocabulary() != prepared_vocabulary:
            raise ValueError(f"The tokenizer's vocabulary differs from the one {corpus} was prepared with.")
        if sequence_length is not None and sequence_length != metadata["sequence_length"]:
            raise ValueError(
                f"{corpus} was prepared with sequence_length={metadata['sequence_length']!r}; "
                f"got sequence_length={sequence_length!r}."
            )
        objective = prepared_objective(metadata)
        if requested is not None and requested != objective:
            asked = f"objective={requested!r}" + (
                f" (next_sentence={next_sentence!r})" if next_sentence is not None else ""
            )
            raise ValueError(
                f"{corpus} was prepared for objective={objective!r}; got {asked}. Prepare the "
                f"corpus again with objective={requested!r}, or train with objective={objective!r}."
            )
        sequence_length = metadata["sequence_length"]
        tokenizer = Tokenizer(prepared_vocabulary, lowercase=metadata["lowercase"],
                              special_tokens_in_strings=False)
        shards = [str(Path(corpus) / name) for name in metadata["shards"]]
        num_examples = metadata["num_examples"] if count_examples else None

        def pairs(worker=0, workers=1):
            # Several workers split the shards by file (see `stream`).
            return tf.data.TFRecordDataset(shards[worker::workers]).map(_parse_pair)

    else:
        objective = requested or "nsp"
        sequence_length = 128 if sequence_length is None else sequence_length
        tokenizer = _make_tokenizer(vocabulary, tokenizer, lowercase)
        source = _text_source(corpus, tokenizer, sequence_length, objective, next_sentence_rate,
                              sentence_order_rate, short_sequence_rate, document_boundary,
                              document_buffer, seed)
        num_examples = _count(source, verbose) if count_examples else None

        def pairs(worker=0, workers=1):
            chunks = tf.data.Dataset.from_generator(source.chunks, output_signature=_CHUNK_SPEC)
            return chunks.flat_map(_unflatten_chunk)

    sequence_length = int(sequence_length)
    if max_predictions is None:
        max_predictions = default_max_predictions(sequence_length, mask_rate)
    vocabulary_tokens = tokenizer.get_vocabulary()
    masker = MaskedLMMasker(
        vocabulary_size=len(vocabulary_tokens),
        mask_token_id=tokenizer.mask_token_id,
        special_token_ids=tokenizer.special_token_ids,
        mask_rate=mask_rate,
        mask_token_rate=mask_token_rate,
        random_token_rate=random_token_rate,
        max_predictions=max_predictions,
        whole_word=whole_word_masking,
        continuation_ids=tokenizer.continuation_ids(),
        max_ngram=max_ngram,
    )
    example = _ExampleMaker(tokenizer, masker, sequence_length, objective, seed)

    counter = EpochCounter()

    def epoch_batches(epoch, worker=0, workers=1, size=int(batch_size)):
        epoch_pairs = pairs(worker, workers)
        # A worker reading its own shards draws its own shuffles and masks.
        epoch = epoch * workers + worker
        if shuffle_buffer:
            epoch_pairs = _shuffle_in_windows(epoch_pairs, int(shuffle_buffer), seed, epoch)
        packed = epoch_pairs.map(example.pack, num_parallel_calls=tf.data.AUTOTUNE)
        batches = packed.batch(size).enumerate()
        return batches.map(
            lambda index, batch: example.mask(epoch, index, batch),
            num_parallel_calls=tf.data.AUTOTUNE,
        )

    dataset = tf.data.Dataset.from_generator(counter, output_signature=tf.TensorSpec([], tf.int64))
    dataset = dataset.flat_map(epoch_batches).prefetch(tf.data.AUTOTUNE)
    batches_per_pass = None
    if num_examples is not None:
        batches_per_pass = math.ceil(num_examples / int(batch_size))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches_per_pass))

    def stream(start_batch=0, input_context=None):
        """Endless passes, from batch `start_batch` of the whole sequence on.

        Pass numbers come from the graph, not from Python state, so every
        iterator of the stream gives the same batches: what a resumed run
        (`Pretrainer.fit`) needs.

        With a `tf.distribute.InputContext` of several workers (prepared
        TFRecords only), this worker's part: its share of the shard files
        (`shards[worker::workers]`) in batches of the per-replica size, from
        global step `start_batch` on, with masks and shuffles of its own.
        """
        if batches_per_pass is None:
            raise ValueError("The stream needs the pass length: make the dataset with count_examples=True.")
        if input_context is not None and input_context.num_input_pipelines > 1:
            return _worker_stream(epoch_batches, shard_sizes(corpus), int(batch_size), int(start_batch),
                                  input_context)
        first_pass, skip = divmod(int(start_batch), batches_per_pass)
        passes = tf.data.Dataset.range(first_pass, 2**62)
        return _shard_by_data(passes.flat_map(epoch_batches).skip(skip).prefetch(tf.data.AUTOTUNE))

    stream.splits_by_file = prepared_folder(corpus) is not None
    dataset = _shard_by_data(dataset)
    dataset.kbert_epoch_counter = counter
    dataset.kbert_objective = objective
    dataset.kbert_num_examples = num_examples
    dataset.kbert_stream = stream
    return dataset


def _shard_by_data(dataset):
    """Several workers reading `dataset` each take their part of every batch.

    Every worker reads the same sequence of (global) batches, so each
    example of a pass goes to exactly one replica. (TensorFlow's automatic
    choice looks for files to split, which it cannot find inside the passes.)
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def shard_sizes(folder):
    """The number of segment pairs in each shard of a prepared folder, in the metadata's order."""
    metadata = read_metadata(folder)
    if "shard_sizes" in metadata:
        return list(metadata["shard_sizes"])
    # Folders written before the sizes were recorded: count the records.
    return [sum(1 for _ in tf.data.TFRecordDataset(str(Path(folder) / name))) for name in metadata["shards"]]


def _worker_stream(epoch_batches, sizes, batch_size, start_batch, context):
    """One worker's endless passes over its shards, from global step `start_batch` on.

    Each step takes one batch of the per-replica size for each of the
    worker's replicas. Every example is used once per epoch when the workers'
    shards hold equally many examples (as many shards per worker, all but
    the last full); otherwise a worker with fewer starts its next pass early.
    """
    worker, workers = context.input_pipeline_id, context.num_input_pipelines
    if len(sizes) < workers:
        raise ValueError(f"{len(sizes)} TFRecord shard(s) cannot be split among {workers} workers; "
                         "prepare the data with fewer examples per shard.")
    per_replica = context.get_per_replica_batch_size(batch_size)
    replicas = context.num_replicas_in_sync // workers
    examples = sum(sizes[worker::workers])
    steps_per_pass = math.ceil(math.ceil(examples / per_replica) / replicas)
    first_pass, skip = divmod(start_batch, steps_per_pass)
    passes = tf.data.Dataset.range(first_pass, 2**62)
    batches = passes.flat_map(lambda epoch: epoch_batches(epoch, worker, workers, per_replica))
    return batches.skip(skip * replicas).prefetch(tf.data.AUTOTUNE)


def _shuffle_in_windows(pairs, window, seed, epoch):
    """Shuffles each window of `window` pairs with a stateless seed of (seed, epoch, window).

    `Dataset.shuffle` would take a per-epoch seed only as a Python number
    (tensor seeds fail once a distribution strategy rewrites the pipeline).
    """

    def permute(index, pairs_in_window):
        size = tf.shape(pairs_in_window[2])[0]
        window_seed = tf.stack([tf.constant(seed + 2**31, tf.int64), epoch * 2**32 + index])
        order = tf.random.experimental.stateless_shuffle(tf.range(size), seed=window_seed)
        return tuple(tf.gather(part, order) for part in pairs_in_window)

    return pairs.ragged_batch(window).enumerate().map(permute).unbatch()


class _ExampleMaker:
    """Packs pairs, then masks a batch with a seed made of (seed, epoch, batch)."""

    def __init__(self, tokenizer, masker, sequence_length, objective, seed):
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.masker = masker
        self.sequence_length = sequence_length
        self.objective = objective
        self.seed = seed

    def pack(self, segment_a, segment_b, label):
        cls, sep = tf.constant([self.cls_id]), tf.constant([self.sep_id])
        if self.objective != "none":
            token_ids = tf.concat([cls, segment_a, sep, segment_b, sep], 0)
            second = tf.size(segment_b) + 1
        else:
            token_ids = tf.concat([cls, segment_a, sep], 0)
            second = 0
        first = tf.size(segment_a) + 2
        segment_ids = tf.concat([tf.zeros([first], tf.int32), tf.ones([second], tf.int32)], 0)
        padding = [[0, self.sequence_length - tf.size(token_ids)]]
        shape = [self.sequence_length]
        return {
            "token_ids": tf.ensure_shape(tf.pad(token_ids, padding), shape),
            "segment_ids": tf.ensure_shape(tf.pad(segment_ids, padding), shape),
            "padding_mask": tf.ensure_shape(tf.pad(tf.ones_like(token_ids), padding), shape),
            "next_sentence_label": label,
        }

    def mask(self, epoch, index, batch):
        seed = tf.stack([tf.constant(self.seed, tf.int64), epoch * 2**32 + index])
        masked = self.masker(batch["token_ids"], seed)
        x = {
            "token_ids": masked["token_ids"],
            "segment_ids": batch["segment_ids"],
            "padding_mask": batch["padding_mask"],
            "mask_positions": masked["mask_positions"],
        }
        y = {"mlm": masked["mask_ids"]}
        weights = {"mlm": masked["mask_weights"]}
        if self.objective != "none":
            # The pair label: NSP's IsNext/NotNext, or SOP's in order/swapped.
            y[self.objective] = batch["next_sentence_label"]
            weights[self.objective] = tf.ones_like(batch["next_sentence_label"], tf.float32)
        return x, y, weights


def _parse_pair(record):
    features = tf.io.parse_single_example(
        record,
        {
            "segment_a": tf.io.RaggedFeature(tf.int64),
            "segment_b": tf.io.RaggedFeature(tf.int64),
            "next_sentence_label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return (
        tf.cast(features["segment_a"], tf.int32),
        tf.cast(features["segment_b"], tf.int32),
        tf.cast(features["next_sentence_label"], tf.int32),
    )


def _pair_example(segment_a, segment_b, label):
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "segment_a": ints(segment_a),
                "segment_b": ints(segment_b),
                "next_sentence_label": ints([label]),
            }
        )
    ).SerializeToString()


def prepare_pretraining_data(
    corpus,
    output_dir,
    vocabulary,
    sequence_length=128,
    next_sentence=None,
    next_sentence_rate=0.5,
    short_sequence_rate=0.1,
    document_boundary="file",
    document_buffer=100,
    seed=0,
    lowercase=True,
    examples_per_shard=100_000,
    overwrite=False,
    verbose=True,
    objective=None,
    sentence_order_rate=0.5,
):
    """Writes the corpus' segment pairs once, as sharded TFRecords.

    `pretraining_dataset(output_dir, seed=seed)` then reads them and gives
    exactly the examples `pretraining_dataset(corpus, seed=seed)` gives,
    without tokenizing the text again. Masking stays dynamic: the records
    hold the unmasked pairs. The folder holds the shards, `vocab.txt` and
    `metadata.json` (settings, the pair `objective`, example count, what was
    skipped); `pretraining_dataset` refuses to read it for another objective.
    Masking options (`mask_rate`, `max_ngram`, ...) are the reader's. It is
    written aside and renamed into place when complete, so a reader never
    sees half of it.

    With `verbose`, the files, documents, pairs and shards done so far are
    shown on stderr while it runs (a line rewritten in place on a terminal;
    elsewhere a plain line every 10 s and at each completed shard), then a
    summary of what was read and skipped.

    Returns:
        The metadata dict.
    """
    output_dir = Path(output_dir)
    if output_dir.exists():
        _check_replaceable(output_dir, corpus, vocabulary, overwrite)
    if int(examples_per_shard) < 1:
        raise ValueError(f"`examples_per_shard` must be at least 1, got {examples_per_shard}.")
    objective = resolve_objective(objective, next_sentence)
    tokenizer = Tokenizer(vocabulary, lowercase=lowercase, special_tokens_in_strings=False)
    source = _text_source(corpus, tokenizer, sequence_length, objective, next_sentence_rate,
                          sentence_order_rate, short_sequence_rate, document_boundary,
                          document_buffer, seed)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    # Not `tempfile.mkdtemp`: its 0700 would hide the published corpus from other users.
    staging = Path(make_folder_beside(output_dir))
    shards, writer, count = [], None, 0
    progress = _Progress(lambda: _reading(source, count, len(shards)), verbose)
    try:
        for segment_a, segment_b, label in source():
            if count % examples_per_shard == 0:
                if writer:
                    writer.close()
                    progress.show(force=True)  # a shard is complete
                shards.append(f"pairs-{len(shards):05d}.tfrecord")
                writer = tf.io.TFRecordWriter(str(staging / shards[-1]))
            writer.write(_pair_example(segment_a, segment_b, label))
            count += 1
            progress.show()
        if writer:
            writer.close()
        progress.finish()
        if verbose:
            print(f"Pretraining corpus: {source.summary()}", file=sys.stderr, flush=True)
        if count == 0:
            raise ValueError(f"The corpus gives no pretraining examples: {source.summary()}.")
        metadata = {
            "format": FORMAT,
            "num_examples": count,
            "shards": shards,
            "shard_sizes": [min(int(examples_per_shard), count - i * int(examples_per_shard))
                            for i in range(len(shards))],
            "sequence_length": int(sequence_length),
            "objective": objective,
            "next_sentence": objective == "nsp",
            "next_sentence_rate": float(next_sentence_rate),
            "sentence_order_rate": float(sentence_order_rate),
            "short_sequence_rate": float(short_sequence_rate),
            "document_boundary": document_boundary,
            "seed": int(seed),
            "lowercase": bool(lowercase),
            "corpus": source.files,
            "summary": source.summary(),
        }
        (staging / VOCABULARY_FILE).write_text("\n".join(tokenizer.get_vocabulary()) + "\n")
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
        # The old folder goes aside first and only then is deleted: a crash
        # between the renames leaves it whole.
        earlier = None
        if output_dir.exists():
            earlier = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old-", dir=output_dir.parent))
            os.replace(output_dir, earlier / output_dir.name)
        os.replace(staging, output_dir)
        if earlier is not None:
            shutil.rmtree(earlier)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return metadata


def _check_replaceable(output_dir, corpus, vocabulary, overwrite):
    """Raises unless `overwrite` may replace `output_dir`: a prepared folder that holds none of the inputs."""
    if not overwrite:
        raise FileExistsError(f"{output_dir} exists; pass overwrite=True to replace it.")
    if not output_dir.is_dir():
        raise NotADirectoryError(f"{output_dir} is a file, not a folder of prepared pretraining data.")
    try:
        read_metadata(output_dir)
    except (OSError, ValueError):
        raise ValueError(f"{output_dir} is not a folder of kbert pretraining data (no metadata.json of "
                         "kbert's), so it is not replaced; choose another output folder.") from None
    patterns = [os.fspath(p) for p in ([corpus] if isinstance(corpus, (str, os.PathLike)) else corpus)]
    inputs = patterns + corpus_files(patterns)
    if isinstance(vocabulary, (str, os.PathLike)):
        inputs.append(os.fspath(vocabulary))
    for path in inputs:
        if contains_path(output_dir, path) or contains_path(path, output_dir):
            raise ValueError(f"{output_dir} overlaps {path}, an input of this preparation (one is, or holds, "
                             "the other); choose another output folder.")
