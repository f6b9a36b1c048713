"""The tagger's task preprocessor: words in windows, one tag per word out."""

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.backend.tensorflow_bridge import model_outputs
from kbert.preprocessing.input_pipeline import padded_length
from kbert.preprocessing.tagger_words import (
    as_ragged,
    as_ragged_words,
    as_sentences,
    batched_sentences,
    characters_before,
    check_labels,
    first_words_of_windows,
    ragged_rows,
    word_pieces,
    word_weights,
    word_weights_in_graph,
)
from kbert.preprocessing.task_preprocessor import (
    TaskPreprocessor,
    check_max_windows,
    make_examples,
    probabilities,
    run_by_length,
)

WORDS_SPEC = tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1, row_splits_dtype=tf.int64)


@keras.saving.register_keras_serializable(package="kbert")
class TaggerPreprocessor(TaskPreprocessor):
    """Sentences of words to windows of word pieces; token logits back to one tag per word.

    Forward: each word is split into WordPiece tokens. A word's label sits
    on its first token (as in BERT's CoNLL-2003 experiments): its other
    pieces, `[CLS]`, `[SEP]` and padding get sample weight 0, so the loss
    and accuracy count first tokens only. A sentence longer than
    `sequence_length - 2` tokens is split, between words, into several
    windows (each `[CLS] ... [SEP]`), filled greedily from the left; every
    word keeps its place, so none is lost. A single word with more pieces
    than a window holds keeps its first pieces; a word that tokenizes to
    nothing (an empty string, a control character) is read as `[UNK]`. A
    batch is padded to its longest window (rounded up to a multiple of 8).

    Serving (`serve`, an export) splits raw texts into words and tags each
    one. It reads a text as far as `max_windows` windows of one token per
    word reach: later words are not tagged (`word_counts` says how many
    were), and characters past what those tokens can span are not
    tokenized, so a request's work is bounded whatever its size. A text
    that fits gets the tags it would get unbounded.

    Reverse: `reverse(word_logits)` gives, per word, `tag_ids`, `tags`,
    `probabilities` and `scores` (the chosen tag's probability).

    Raw examples are `(sentences, tags)`: lists of words, and one tag (a
    label string or id) per word; or a `tf.data.Dataset` of `(words, tags)`
    (unbatched, or batched with `ragged_batch`). All of it is TensorFlow ops
    on ragged tensors, in `tf.data` and in an exported graph alike.

    Args:
        packer: a `kbert.TextPacker`: its tokenizer splits the words and
            its `sequence_length` is the window size.
        labels: the tag strings, in id order, e.g.
            `kbert.data.CONLL2003_LABELS`.
        max_windows: in serving, the most windows a text is read for (64
            windows of 126 words at a `sequence_length` of 128: 8,064
            words); None reads every word, however long the text sent.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "peter", "visit", "##ed", "paris"]
    >>> packer = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=16)
    >>> preprocessor = kbert.TaggerPreprocessor(packer, labels=["O", "B-PER", "B-LOC"])
    >>> inputs, labels, weights = preprocessor([["Peter", "visited", "Paris"]], [["B-PER", "O", "B-LOC"]])
    >>> inputs["token_ids"].numpy().tolist()
    [[2, 5, 6, 7, 8, 3, 0, 0]]
    >>> weights.numpy().tolist()
    [[0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]]
    """

    packs_examples = True
    per_token_targets = True

    def __init__(self, packer, labels=None, max_windows=64, **kwargs):
        kwargs.pop("text_pairs", None)  # always single sentences
        super().__init__(packer, text_pairs=False, **kwargs)
        self.labels = check_labels(labels)
        self.max_windows = check_max_windows(max_windows)

    @property
    def num_labels(self):
        return len(self.labels)

    # --- Forward: python inputs -----------------------------------------------

    def call(self, x, y=None, sample_weight=None):
        """The forward step on a batch of sentences (lists of words), with tags and weights."""
        if y is None:
            return self.pack_words(as_ragged_words(x))[0]
        tensors = self.examples(x, y, sample_weight).tensors
        return self.forward_batch(*tensors)

    def examples(self, x, y=None, sample_weight=None):
        sentences = as_sentences(x)
        if y is None:
            return make_examples((ragged_rows(sentences, tf.string),), len(sentences), ragged=True)
        lengths = [len(s) for s in sentences]
        tag_ids = self.tag_ids(y, lengths)
        weights = word_weights(sample_weight, lengths)
        # Sentences without words carry no tags: nothing to learn from them.
        keep = [i for i, n in enumerate(lengths) if n]
        if not keep:
            raise ValueError("All sentences are empty; there is nothing to train or evaluate on.")
        tensors = (
            ragged_rows([sentences[i] for i in keep], tf.string),
            ragged_rows([tag_ids[i] for i in keep], tf.int32),
            ragged_rows([weights[i] for i in keep], tf.float32),
        )
        return make_examples(tensors, len(keep), ragged=True)

    def tag_ids(self, tags, lengths):
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

    # --- Forward: tf.data ---------------------------------------------------------

    def batch_dataset(self, dataset, batch_size):
        dataset = batched_sentences(dataset, batch_size)
        if not isinstance(dataset.element_spec, tuple):
            raise ValueError("To train or evaluate, the dataset must yield (words, tags).")

        def from_dataset(words, tags, weights=None):
            words = as_ragged(words)
            return words, self.tag_ids_in_graph(as_ragged(tags)), word_weights_in_graph(weights, words)

        return dataset.map(from_dataset, num_parallel_calls=tf.data.AUTOTUNE)

    def example_lengths(self, words, *rest):
        return words.row_lengths()

    def forward_batch(self, words, tag_ids=None, weights=None):
        """`(inputs, labels, sample_weight)` for a batch: labels on first tokens only."""
        if tag_ids is None:
            return self.pack_words(words)[0]
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

    def tag_ids_in_graph(self, tags):
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
        tokenizer = self.tokenizer
        window_budget = self.sequence_length - 2  # room for [CLS] and [SEP]
        pieces = word_pieces(tokenizer, words.flat_values, window_budget)
        piece_counts = pieces.row_lengths()
        window_starts = first_words_of_windows(piece_counts, words.row_splits, window_budget)
        windows = tf.RaggedTensor.from_row_starts(pieces, window_starts, validate=False)

        token_ids, segment_ids = tf_text.combine_segments(
            [windows.merge_dims(1, 2)],
            start_of_sequence_id=tokenizer.cls_token_id,
            end_of_segment_id=tokenizer.sep_token_id,
        )
        # Padded to the longest window, not to `sequence_length`: the
        # logits of real tokens do not depend on the padding.
        width = tf.minimum(padded_length(tf.reduce_max(token_ids.row_lengths())), self.sequence_length)
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

    def word_logits(self, model, words):
        """The model's logits at each word's first token, `(words, num_labels)` float32."""
        inputs, word_positions = self.pack_words(words)
        # Windows of similar length run together, each run cut to its
        # longest; a word's first token is never padding, so no logit read
        # here depends on it.
        logits = run_by_length(lambda rows: model_outputs(model, rows), inputs, per_token=True)
        return tf.gather_nd(logits, word_positions)

    # --- Reverse and serving --------------------------------------------------------

    def reverse(self, logits):
        """Per word (or token): `tag_ids`, `tags`, `probabilities` and `scores`."""
        probs = probabilities(logits)
        tag_ids = tf.argmax(probs, axis=-1, output_type=tf.int32)
        return {
            "tag_ids": tag_ids,
            "tags": tf.gather(tf.constant(self.labels), tag_ids),
            "probabilities": probs,
            "scores": tf.reduce_max(probs, axis=-1),
        }

    def serving_inputs(self, text_pairs=None):
        if text_pairs:
            raise ValueError("`text_pairs` applies to classifiers and embedders.")
        return [("text", [None])]

    def serve(self, model, texts):
        """Splits each text into words, as the tokenizer does, and tags every word (up to `max_windows` windows)."""
        if self.max_windows is not None:
            # Every word is at least one token: a text that fits has at most
            # this many, and keeps its characters and offsets as sent.
            max_words = self.max_windows * (self.sequence_length - 2)
            texts = self.tokenizer.bound_texts(texts, max_words)
        texts, words, byte_starts, byte_ends = self.tokenizer.split_words(texts)
        if self.max_windows is not None:
            words, byte_starts, byte_ends = (
                ragged[:, :max_words] for ragged in (words, byte_starts, byte_ends)
            )
        no_words = tf.equal(tf.size(words.flat_values), 0)
        logits = tf.cond(
            no_words,
            lambda: tf.zeros([0, self.num_labels], tf.float32),
            lambda: self.word_logits(model, words),
        )
        tagged = self.reverse(logits)

        def per_text(flat, default):
            return words.with_flat_values(flat).to_tensor(default_value=default)

        char_starts, char_ends = characters_before(texts, byte_starts, byte_ends)
        return {
            "words": per_text(words.flat_values, ""),
            "tags": per_text(tagged["tags"], ""),
            "tag_ids": per_text(tagged["tag_ids"], -1),
            "scores": per_text(tagged["scores"], 0.0),
            "word_starts": per_text(char_starts, -1),
            "word_ends": per_text(char_ends, -1),
            "word_counts": tf.cast(words.row_lengths(), tf.int32),
        }

    def serve_token_ids(self, model, inputs):
        """Per token: `tag_ids`, `tags` and `probabilities`."""
        tagged = self.reverse(model_outputs(model, inputs))
        return {name: tagged[name] for name in ("tag_ids", "tags", "probabilities")}

    def get_config(self):
        config = super().get_config()
        del config["text_pairs"]
        config["labels"] = list(self.labels)
        config["max_windows"] = self.max_windows
        return config
