"""Segment pairs to the batches of masked examples that `Pretrainer.fit` trains on: pass by pass, or streamed.

Masks are drawn anew each epoch (dynamic masking) from stateless seeds made
of the seed, the epoch and the batch's number, so a run, its TFRecord twin
and a run resumed from a backup see exactly the same examples.
"""

import math

import tensorflow as tf

from kbert.pretraining.masked_lm_masker import MaskedLMMasker, default_max_predictions
from kbert.pretraining.prepared_pairs import shard_sizes
from kbert.pretraining.pretraining_data import PretrainingData


class EpochCounter:
    """Numbers the passes over a dataset; each new iterator takes the next one.

    So each epoch of a plain `fit(dataset, epochs=...)` draws new masks.
    (`Pretrainer.fit` numbers its passes in the graph instead; see
    `PretrainingData.stream`.)
    """

    def __init__(self):
        self.next_epoch = 0

    def __call__(self):
        epoch = self.next_epoch
        self.next_epoch += 1
        yield epoch


def pretraining_batches(pairs, example_maker, settings, num_examples=None, prepared_folder=None):
    """The `PretrainingData` of `pairs(worker, workers)` (one pass of segment pairs as `tf.data`).

    `settings` are resolved (`seed`, `sequence_length` and `objective` set);
    `num_examples` gives the dataset its length; `prepared_folder` names the
    TFRecords the pairs come from, which several workers split by file.
    """
    epoch_batches = EpochBatches(pairs, example_maker, settings)
    counter = EpochCounter()
    dataset = tf.data.Dataset.from_generator(counter, output_signature=tf.TensorSpec([], tf.int64))
    dataset = dataset.flat_map(epoch_batches).prefetch(tf.data.AUTOTUNE)
    batches_per_pass = None
    if num_examples is not None:
        batches_per_pass = math.ceil(num_examples / int(settings.batch_size))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches_per_pass))
    stream = BatchStream(epoch_batches, batches_per_pass, int(settings.batch_size), prepared_folder)
    return PretrainingData(_shard_by_data(dataset), objective=settings.objective,
                           num_examples=num_examples, stream=stream, epoch_counter=counter)


class ExampleMaker:
    """Packs pairs, then masks a batch with a seed made of (seed, epoch, batch)."""

    def __init__(self, tokenizer, settings):
        self.cls_id = tokenizer.cls_token_id
        self.sep_id = tokenizer.sep_token_id
        self.sequence_length = int(settings.sequence_length)
        self.objective = settings.objective
        self.seed = int(settings.seed)
        max_predictions = settings.max_predictions
        if max_predictions is None:
            max_predictions = default_max_predictions(self.sequence_length, settings.mask_rate)
        self.masker = MaskedLMMasker(
            vocabulary_size=len(tokenizer.get_vocabulary()),
            mask_token_id=tokenizer.mask_token_id,
            special_token_ids=tokenizer.special_token_ids,
            mask_rate=settings.mask_rate,
            mask_token_rate=settings.mask_token_rate,
            random_token_rate=settings.random_token_rate,
            max_predictions=max_predictions,
            whole_word=settings.whole_word_masking,
            continuation_ids=tokenizer.continuation_ids(),
            max_ngram=settings.max_ngram,
        )

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


class EpochBatches:
    """One pass's batches: pairs shuffled in windows, packed, batched, then masked."""

    def __init__(self, pairs, example_maker, settings):
        self.pairs = pairs
        self.example = example_maker
        self.batch_size = int(settings.batch_size)
        self.shuffle_buffer = int(settings.shuffle_buffer)
        self.seed = int(settings.seed)

    def __call__(self, epoch, worker=0, workers=1, size=None):
        """Pass `epoch`'s batches (of `size` examples, the batch size by default) of worker `worker`'s pairs."""
        epoch_pairs = self.pairs(worker, workers)
        # A worker reading its own shards draws its own shuffles and masks.
        epoch = epoch * workers + worker
        if self.shuffle_buffer:
            epoch_pairs = _shuffle_in_windows(epoch_pairs, self.shuffle_buffer, self.seed, epoch)
        packed = epoch_pairs.map(self.example.pack, num_parallel_calls=tf.data.AUTOTUNE)
        batches = packed.batch(size or self.batch_size).enumerate()
        return batches.map(
            lambda index, batch: self.example.mask(epoch, index, batch),
            num_parallel_calls=tf.data.AUTOTUNE,
        )


class BatchStream:
    """Endless passes of batches, from any batch of the whole sequence on.

    Pass numbers come from the graph, not from Python state, so every
    iterator of the stream gives the same batches: what a resumed run
    (`Pretrainer.fit`) needs.
    """

    def __init__(self, epoch_batches, batches_per_pass, batch_size, prepared_folder=None):
        self.epoch_batches = epoch_batches
        self.batches_per_pass = batches_per_pass
        self.batch_size = batch_size
        self.prepared_folder = prepared_folder
        # Several workers split prepared TFRecords by file, text by data (`kbert.backend.distribute`).
        self.splits_by_file = prepared_folder is not None

    def __call__(self, start_batch=0, input_context=None):
        """Endless passes, from batch `start_batch` of the whole sequence on.

        With a `tf.distribute.InputContext` of several workers (prepared
        TFRecords only), this worker's part: its share of the shard files
        (`shards[worker::workers]`) in batches of the per-replica size, from
        global step `start_batch` on, with masks and shuffles of its own.
        """
        if self.batches_per_pass is None:
            raise ValueError("The stream needs the pass length: make the dataset with count_examples=True.")
        if input_context is not None and input_context.num_input_pipelines > 1:
            return _worker_stream(self.epoch_batches, shard_sizes(self.prepared_folder), self.batch_size,
                                  int(start_batch), input_context)
        first_pass, skip = divmod(int(start_batch), self.batches_per_pass)
        passes = tf.data.Dataset.range(first_pass, 2**62)
        return _shard_by_data(passes.flat_map(self.epoch_batches).skip(skip).prefetch(tf.data.AUTOTUNE))


def _shard_by_data(dataset):
    """Several workers reading `dataset` each take their part of every batch.

    Every worker reads the same sequence of (global) batches, so each
    example of a pass goes to exactly one replica. (TensorFlow's automatic
    choice looks for files to split, which it cannot find inside the passes.)
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


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
