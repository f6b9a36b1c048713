"""Token tagging (named entities, parts of speech) on BERT's sequence output."""

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.metrics.entity_f1 import entity_scores
from kbert.models.encoder import bert_initializer
from kbert.models.task import (
    DEFAULT_BATCH_SIZE,
    LENGTH_GROUP_BATCHES,
    Task,
    _is_preprocessed,
    encoder_and_preprocessor,
    padded_length,
    shuffle_batches,
    sort_into_batches,
)

_WORDS_SPEC = tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1, row_splits_dtype=tf.int64)


@keras.saving.register_keras_serializable(package="kbert")
class Tagger(Task):
    """Tags every word of a sentence: named entities (CoNLL-2003), parts of speech.

    Sentences come as lists of words, tags as one label per word. Each word
    is split into WordPiece tokens; the encoder's `sequence_output` goes
    through dropout and a dense layer that gives one logit per label at every
    token. A word's label sits on its first token (as in BERT's CoNLL-2003
    experiments): the loss and accuracy count only first tokens, while other
    pieces, `[CLS]`, `[SEP]` and padding get sample weight 0. (The
    encoder's pooler is not used: it is left out of training and stays as
    it is.)

    A sentence longer than `sequence_length - 2` tokens is split, between
    words, into several windows (each packed as `[CLS] ... [SEP]`), filled
    greedily from the left; the predictions are put back together, so every
    word gets a tag and no word is lost. A single word with more pieces than
    a window holds keeps its first pieces. A word that tokenizes to nothing
    (an empty string, a control character) is read as `[UNK]`.

    Preprocessing (tokenizing the words, splitting windows, packing, placing
    the labels) is TensorFlow ops on ragged tensors: it runs in `tf.data`
    during `fit` and `evaluate`, and in one `tf.function` with the model in
    `predict`. A batch is padded to its longest window (rounded up to a
    multiple of 8), and `fit` batches sentences of similar word counts
    together, so short sentences train fast.

    `fit` and `evaluate` take `(sentences, tags)`, where tags are label
    strings or ids, or a `tf.data.Dataset` of `(words, tags)` (unbatched, or
    batched with `ragged_batch`). `predict` returns one tag string per word;
    `predict_logits` and `predict_proba` give the scores; `evaluate_entities`
    gives entity-level precision, recall and F1.

    Compiled as BERT fine-tunes: AdamW with warm-up and linear decay (see
    `kbert.Classifier`), sparse categorical cross-entropy on logits averaged
    over the first tokens, and their accuracy. Call `compile` to change it.

    Args:
        encoder: a `kbert.Encoder`.
        labels: the tag strings, in id order, e.g.
            `kbert.data.CONLL2003_LABELS`.
        preprocessor: a `kbert.Preprocessor`: its tokenizer splits the
            words and its `sequence_length` is the window size.
        dropout: dropout before the output layer.

    Example:
    >>> vocab = kbert.learn_vocabulary(["Peter Blackburn visited Germany ."] * 10,
    ...                                vocabulary_size=60, lowercase=False, verbose=False)
    >>> ner = kbert.tagger("tiny", labels=kbert.data.CONLL2003_LABELS, vocabulary=vocab,
    ...                    lowercase=False, sequence_length=16)
    >>> history = ner.fit([["Peter", "Blackburn", "visited", "Germany"]],
    ...                   [["B-PER", "I-PER", "O", "B-LOC"]], epochs=1, verbose=0)
    >>> [len(tags) for tags in ner.predict([["Peter", "visited", "Germany", "."]], verbose=0)]
    [4]
    """

    uses_pooler = False  # outputs come from the sequence output

    def __init__(self, encoder, labels, preprocessor, dropout=0.1, **kwargs):
        encoder, preprocessor = encoder_and_preprocessor(encoder, preprocessor)
        labels = _check_labels(labels)

        # === Layers ===
        self.encoder = encoder
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.token_embedding.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            len(labels),
            kernel_initializer=bert_initializer(),
            dtype=encoder.token_embedding.dtype_policy,
            name="logits",
        )

        # === Functional model ===
        inputs = encoder.input
        sequence = encoder(inputs)["sequence_output"]
        logits = self.output_dense(self.output_dropout(sequence))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.labels = labels
        self.dropout = dropout
        self._word_logits_function = None
        self.compile()

    @property
    def num_labels(self):
        return len(self.labels)

    def default_loss(self):
        # Averaged over the tokens whose sample weight is not 0: the first
        # token of each word.
        return keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        )

    def default_metrics(self, compile_kwargs):
        # Accuracy on the first tokens of words, as a weighted metric.
        if compile_kwargs.get("weighted_metrics") is None:
            compile_kwargs["weighted_metrics"] = [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        return None

    # Preprocessing, in TensorFlow ops.
    def pack_words(self, words):
        """Model inputs for a batch of sentences, and where each word's first token is.

        Args:
            words: a `tf.RaggedTensor` of strings, `(sentences, (words))`.

        Returns:
            `(inputs, word_positions)`: `inputs` is the dict of `token_ids`,
            `segment_ids` and `padding_mask`, one row per window (a sentence
            has one window, or several when it is long); `word_positions` is
            an int64 tensor `(words, 2)`, for every word in order its window
            row and the position of its first token there.
        """
        tokenizer = self.preprocessor.tokenizer
        sequence_length = self.preprocessor.sequence_length
        window_budget = sequence_length - 2  # room for [CLS] and [SEP]
        pieces = _word_pieces(tokenizer, words.flat_values, window_budget)
        piece_counts = pieces.row_lengths()
        window_starts = _window_starts(piece_counts, words.row_splits, window_budget)
        windows = tf.RaggedTensor.from_row_starts(pieces, window_starts, validate=False)

        token_ids, segment_ids = tf_text.combine_segments(
            [windows.merge_dims(1, 2)],
            start_of_sequence_id=tokenizer.cls_token_id,
            end_of_segment_id=tokenizer.sep_token_id,
        )
        # Padded to the longest window, not to `sequence_length`: the
        # logits of real tokens do not depend on the padding.
        width = tf.minimum(padded_length(tf.reduce_max(token_ids.row_lengths())), sequence_length)
        token_ids, padding_mask = tf_text.pad_model_inputs(
            token_ids, width, pad_value=tokenizer.pad_token_id
        )
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, width, pad_value=0)
        inputs = {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
        }

        # Each word's first token: its offset among all pieces, less its
        # window's first offset, plus 1 for [CLS].
        first_piece = tf.math.cumsum(piece_counts, exclusive=True)
        word_windows = windows.value_rowids()
        window_first_piece = tf.gather(first_piece, window_starts)
        positions = 1 + first_piece - tf.gather(window_first_piece, word_windows)
        return inputs, tf.stack([word_windows, positions], axis=1)

    def _training_example(self, words, tag_ids, weights):
        """`(inputs, labels, sample_weight)` for a batch: labels on first tokens only."""
        tf.debugging.assert_equal(
            words.row_lengths(),
            tag_ids.row_lengths(),
            message="A sentence has more or fewer tags than words.",
        )
        tf.debugging.assert_positive(
            tf.size(words.flat_values),
            message="A batch holds only empty sentences; filter them out of the dataset.",
        )
        inputs, word_positions = self.pack_words(words)
        shape = tf.shape(inputs["token_ids"], out_type=tf.int64)
        labels = tf.scatter_nd(word_positions, tf.cast(tag_ids.flat_values, tf.int32), shape)
        weights = tf.cast(weights.flat_values, tf.float32)
        sample_weight = tf.scatter_nd(word_positions, weights, shape)
        return inputs, labels, sample_weight

    def _tag_ids_in_graph(self, tags):
        """Label ids of a ragged batch of tags given as strings or ids; checks them."""
        if tags.dtype == tf.string:
            table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(self.labels), tf.range(self.num_labels, dtype=tf.int32)
                ),
                default_value=-1,
            )
            ids = tags.with_flat_values(table.lookup(tags.flat_values))
            unknown = tf.boolean_mask(tags.flat_values, ids.flat_values < 0)
            tf.debugging.Assert(
                tf.size(unknown) == 0,
                ["Unknown tags (the tagger's labels are", str(self.labels), "):", unknown[:5]],
                summarize=5,
            )
            return ids
        ids = tf.cast(tags, tf.int32)
        flat = ids.flat_values
        bad = tf.boolean_mask(flat, (flat < 0) | (flat >= self.num_labels))
        tf.debugging.Assert(
            tf.size(bad) == 0,
            [f"Tag ids must be in [0, {self.num_labels}); got", bad[:5]],
            summarize=5,
        )
        return ids

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("With a tf.data.Dataset, put the tags in the dataset, not in `y`.")
            if _is_preprocessed(x.element_spec):
                return x  # Keras' own evaluate inside fit, for one.
            dataset = _batched_sentences(x, batch_size)
            parts = len(dataset.element_spec) if isinstance(dataset.element_spec, tuple) else 1
            if parts == 1:
                raise ValueError("To train or evaluate, the dataset must yield (words, tags).")

            def from_dataset(words, tags, weights=None):
                words = _as_ragged(words)
                tag_ids = self._tag_ids_in_graph(_as_ragged(tags))
                weights = _word_weights_in_graph(weights, words)
                return self._training_example(words, tag_ids, weights)

            dataset = dataset.map(_no_autograph(from_dataset), num_parallel_calls=tf.data.AUTOTUNE)
            return dataset.prefetch(tf.data.AUTOTUNE)

        if y is None:
            raise ValueError("To train or evaluate, give the tags of the sentences as `y`.")
        sentences = _as_sentences(x)
        lengths = [len(s) for s in sentences]
        tag_ids = self._tag_ids(y, lengths)
        weights = _word_weights(sample_weight, lengths)
        # Sentences without words carry no tags: nothing to learn from them.
        keep = [i for i, n in enumerate(lengths) if n]
        if not keep:
            raise ValueError("All sentences are empty; there is nothing to train or evaluate on.")
        words = _ragged([sentences[i] for i in keep], tf.string)
        tag_ids = _ragged([tag_ids[i] for i in keep], tf.int32)
        weights = _ragged([weights[i] for i in keep], tf.float32)
        dataset = tf.data.Dataset.from_tensor_slices((words, tag_ids, weights))
        if shuffle:
            # Batches of sentences with similar word counts: little padding.
            dataset = dataset.shuffle(len(keep), reshuffle_each_iteration=True)
            dataset = dataset.ragged_batch(batch_size * LENGTH_GROUP_BATCHES)
            dataset = sort_into_batches(dataset, lambda words, *_: words.row_lengths(), batch_size)
        else:
            dataset = dataset.ragged_batch(batch_size)
        dataset = dataset.map(_no_autograph(self._training_example), num_parallel_calls=tf.data.AUTOTUNE)
        if shuffle:
            dataset = shuffle_batches(dataset, batch_size, len(keep))
        return dataset.prefetch(tf.data.AUTOTUNE)

    def _tag_ids(self, tags, lengths):
        """Label ids of each sentence's tags (strings or ids), checked against the words."""
        if isinstance(tags, (str, bytes)) or isinstance(tags, tf.data.Dataset):
            raise TypeError("Tags must be a list with one list of tags per sentence.")
        tags = list(tags)
        if len(tags) != len(lengths):
            raise ValueError(f"Got {len(lengths)} sentences but {len(tags)} lists of tags.")
        index = {label: i for i, label in enumerate(self.labels)}
        ids = []
        for i, (sentence_tags, length) in enumerate(zip(tags, lengths)):
            if isinstance(sentence_tags, (str, bytes)):
                raise TypeError(
                    f"The tags of sentence {i} are a string, not a list: {sentence_tags!r}."
                )
            sentence_tags = list(sentence_tags)
            if len(sentence_tags) != length:
                raise ValueError(f"Sentence {i} has {length} words but {len(sentence_tags)} tags.")
            sentence_ids = []
            for j, tag in enumerate(sentence_tags):
                if isinstance(tag, bytes):
                    tag = tag.decode("utf-8")
                if isinstance(tag, str):
                    if tag not in index:
                        raise ValueError(
                            f"Unknown tag {tag!r} (word {j} of sentence {i}); the tagger's labels "
                            f"are {self.labels}."
                        )
                    sentence_ids.append(index[tag])
                elif isinstance(tag, (int, np.integer)) and not isinstance(tag, bool):
                    if not 0 <= tag < self.num_labels:
                        raise ValueError(
                            f"Tag id {tag} (word {j} of sentence {i}) is not in "
                            f"[0, {self.num_labels})."
                        )
                    sentence_ids.append(int(tag))
                else:
                    raise TypeError(
                        f"Tag {j} of sentence {i} is a {type(tag).__name__}: {tag!r}; give label "
                        "strings or integer ids."
                    )
            ids.append(sentence_ids)
        return ids

    # Prediction.
    def _word_logits(self, words):
        inputs, word_positions = self.pack_words(words)
        logits = self(inputs, training=False)
        return tf.gather_nd(tf.cast(logits, tf.float32), word_positions)

    def predict_logits(self, x, batch_size=None, verbose="auto"):
        """Label logits of every word: one float32 array `(words, num_labels)` per sentence.

        `x` is a list of sentences (lists of words) or a `tf.data.Dataset`
        of sentences (or of `(words, tags)`; the tags are ignored).
        """
        if self._word_logits_function is None:
            self._word_logits_function = tf.function(
                self._word_logits, input_signature=[_WORDS_SPEC], autograph=False
            )
        batches = list(self._sentence_batches(x, batch_size or DEFAULT_BATCH_SIZE))
        show_progress = verbose not in (0, False) and batches
        progress = keras.utils.Progbar(len(batches)) if show_progress else None
        results = []
        for step, words in enumerate(batches):
            lengths = words.row_lengths().numpy()
            flat = self._word_logits_function(words).numpy() if lengths.sum() else None
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            results.extend(
                flat[start:end] if flat is not None else np.zeros((0, self.num_labels), "float32")
                for start, end in zip(offsets[:-1], offsets[1:])
            )
            if progress is not None:
                progress.update(step + 1)
        return results

    def predict_proba(self, x, batch_size=None, verbose="auto"):
        """Label probabilities of every word: one array `(words, num_labels)` per sentence."""
        probabilities = []
        for logits in self.predict_logits(x, batch_size=batch_size, verbose=verbose):
            exp = np.exp(logits - logits.max(axis=-1, keepdims=True, initial=-np.inf))
            probabilities.append(exp / exp.sum(axis=-1, keepdims=True))
        return probabilities

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """The most likely tag of every word: one list of tag strings per sentence.

        `x` is a list of sentences, each a list of words (or a
        `tf.data.Dataset` of them); a sentence of `n` words always gets `n`
        tags, however long it is.
        """
        if kwargs:
            raise TypeError(f"Unexpected arguments for Tagger.predict: {sorted(kwargs)}.")
        return [
            [self.labels[i] for i in logits.argmax(axis=-1)]
            for logits in self.predict_logits(x, batch_size=batch_size, verbose=verbose)
        ]

    def evaluate_entities(self, sentences, tags, batch_size=None, verbose=0):
        """Entity-level precision, recall and F1 of the predicted tags, as conlleval counts them.

        Args:
            sentences: a list of sentences, each a list of words.
            tags: their true tags, label strings or ids, in IOB1 or IOB2.

        Returns:
            The dict of `kbert.metrics.entity_scores`: micro-averaged `precision`,
            `recall`, `f1`, counts, and `per_type` scores.
        """
        sentences = _as_sentences(sentences)
        tag_ids = self._tag_ids(tags, [len(s) for s in sentences])
        true_tags = [[self.labels[i] for i in ids] for ids in tag_ids]
        predicted = self.predict(sentences, batch_size=batch_size, verbose=verbose)
        return entity_scores(true_tags, predicted)

    def _sentence_batches(self, x, batch_size):
        """Ragged batches of words to predict on."""
        if isinstance(x, tf.data.Dataset):
            dataset = _batched_sentences(x, batch_size)
            if isinstance(dataset.element_spec, tuple):
                dataset = dataset.map(lambda words, *rest: words)
            for words in dataset:
                yield _as_ragged(words)
            return
        sentences = _as_sentences(x)
        for start in range(0, len(sentences), batch_size):
            yield _ragged(sentences[start : start + batch_size], tf.string)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "labels": list(self.labels),
                "dropout": self.dropout,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _no_autograph(function):
    # Preprocessing has no Python control flow on tensors; skipping AutoGraph's
    # conversion makes tracing faster.
    return tf.autograph.experimental.do_not_convert(function)


def _check_labels(labels):
    if isinstance(labels, (str, bytes)) or labels is None:
        raise TypeError(
            "`labels` must be a list of tag strings (e.g. kbert.data.CONLL2003_LABELS), "
            f"got {labels!r}."
        )
    labels = list(labels)
    for label in labels:
        if not isinstance(label, str) or not label:
            raise ValueError(f"Every label must be a non-empty string, got {label!r} in {labels}.")
    if len(labels) < 2:
        raise ValueError(f"A tagger needs at least 2 labels, got {labels}.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"Labels must be unique; {repeated} repeat in {labels}.")
    return labels


def _word_pieces(tokenizer, words, max_pieces):
    """Token ids of each word `(words, (pieces))`, between 1 and `max_pieces` of them.

    A word that tokenizes to nothing becomes `[UNK]`, so it keeps a position
    and a tag; a longer word keeps its first `max_pieces` pieces.
    """
    pieces = tokenizer(words)
    empty = tf.equal(pieces.row_lengths(), 0)
    unknown = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], tf.constant(tokenizer.unk_token_id)),
        tf.cast(empty, tf.int64),
    )
    return tf.concat([pieces, unknown], axis=1)[:, :max_pieces]


def _window_starts(piece_counts, sentence_splits, window_budget):
    """The index of the first word of every window, in order.

    Windows never split a word and never cross sentences: each window takes
    as many whole words as fit in `window_budget` pieces (every word has at
    most that many). The loop runs once per window of the longest sentence,
    over all sentences at once.
    """
    piece_ends = tf.math.cumsum(piece_counts)
    # One more entry, the total, so that a finished sentence's start indexes it.
    piece_starts = tf.concat([piece_ends - piece_counts, piece_ends[-1:]], 0)
    starts, limits = sentence_splits[:-1], sentence_splits[1:]

    def next_windows(start, window_starts):
        open_ = start < limits
        reach = tf.gather(piece_starts, start) + window_budget
        end = tf.searchsorted(
            piece_ends[tf.newaxis], reach[tf.newaxis], side="right", out_type=tf.int64
        )
        end = tf.minimum(end[0], limits)
        window_starts = tf.concat([window_starts, tf.boolean_mask(start, open_)], 0)
        return tf.where(open_, end, start), window_starts

    _, window_starts = tf.while_loop(
        lambda start, _: tf.reduce_any(start < limits),
        next_windows,
        (starts, tf.zeros([0], tf.int64)),
        shape_invariants=(starts.shape, tf.TensorShape([None])),
    )
    # In order of position: each pass of the loop added one window per sentence.
    is_start = tf.scatter_nd(
        window_starts[:, tf.newaxis],
        tf.ones_like(window_starts),
        tf.shape(piece_counts, out_type=tf.int64),
    )
    return tf.where(is_start > 0)[:, 0]


def _as_sentences(x):
    """Checks a list of sentences (lists of word strings) and returns it as lists of str."""
    if isinstance(x, (str, bytes)):
        raise TypeError("Expected a list of sentences (lists of words), got a single string.")
    sentences = []
    for i, sentence in enumerate(x):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"Sentence {i} is a string, not a list of words: {sentence!r}. Split it into words "
                "first (e.g. text.split()), or wrap a single sentence's words in a list."
            )
        words = []
        for j, word in enumerate(sentence):
            if isinstance(word, bytes):
                word = word.decode("utf-8", errors="replace")
            if not isinstance(word, str):
                raise TypeError(
                    f"Word {j} of sentence {i} is a {type(word).__name__}, not a string: {word!r}."
                )
            words.append(word)
        sentences.append(words)
    return sentences


def _ragged(rows, dtype):
    lengths = [len(row) for row in rows]
    flat = [value for row in rows for value in row]
    values = tf.constant(flat, dtype) if flat else tf.zeros([0], dtype)
    return tf.RaggedTensor.from_row_lengths(values, tf.constant(lengths, tf.int64))


def _word_weights(sample_weight, lengths):
    """Per-word sample weights from none, one per sentence, or one per word."""
    if sample_weight is None:
        return [[1.0] * n for n in lengths]
    sample_weight = list(sample_weight)
    if len(sample_weight) != len(lengths):
        raise ValueError(f"Got {len(lengths)} sentences but {len(sample_weight)} sample weights.")
    weights = []
    for i, (weight, length) in enumerate(zip(sample_weight, lengths)):
        if np.ndim(weight) == 0:
            weights.append([float(weight)] * length)
        else:
            weight = [float(w) for w in weight]
            if len(weight) != length:
                raise ValueError(
                    f"Sentence {i} has {length} words but {len(weight)} sample weights."
                )
            weights.append(weight)
    return weights


def _batched_sentences(dataset, batch_size):
    """A dataset of sentences (or tuples starting with them) as ragged batches."""
    spec = dataset.element_spec
    words_spec = spec[0] if isinstance(spec, tuple) else spec
    if isinstance(spec, dict) or not hasattr(words_spec, "shape") or words_spec.dtype != tf.string:
        raise TypeError(
            "The dataset must yield sentences (1-D string tensors of words), or (words, tags) "
            f"pairs; got elements of {spec}."
        )
    rank = words_spec.shape.rank
    if rank == 1:
        return dataset.ragged_batch(batch_size)
    if rank == 2 and isinstance(words_spec, tf.RaggedTensorSpec):
        return dataset
    raise ValueError(
        "The dataset must yield one sentence (a 1-D tensor of words) per element, or ragged "
        f"batches of them (`dataset.ragged_batch(n)`); got elements of {spec}."
    )


def _as_ragged(values):
    if isinstance(values, tf.RaggedTensor):
        return values
    return tf.RaggedTensor.from_tensor(values)


def _word_weights_in_graph(weights, words):
    """Per-word float weights (ragged like `words`) from none, one per sentence, or one per word."""
    if weights is None:
        return words.with_flat_values(tf.ones_like(words.flat_values, tf.float32))
    weights = tf.cast(weights, tf.float32)
    if isinstance(weights, tf.RaggedTensor):
        return weights
    if weights.shape.rank == 1:  # One weight per sentence.
        return words.with_flat_values(tf.gather(weights, words.value_rowids()))
    return tf.RaggedTensor.from_tensor(weights, lengths=words.row_lengths())
