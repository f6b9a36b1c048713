"""Token tagging (named entities, parts of speech) on BERT's sequence output."""

import keras
import numpy as np

from kbert.backend.model_inputs import is_token_ids
from kbert.backend.tensorflow_support import is_tf_dataset, require_tensorflow
from kbert.metrics.entity_f1 import entity_scores
from kbert.models.task_model import (
    TaskModel,
    deprecated,
    encoder_and_preprocessor,
    head_setting,
    output_head,
    softmax,
)


@keras.saving.register_keras_serializable(package="kbert")
class Tagger(TaskModel):
    """Tags every word of a sentence: named entities (CoNLL-2003), parts of speech.

    Sentences come as lists of words, tags as one label per word. The
    `kbert.TaggerPreprocessor` splits words into WordPiece tokens and long
    sentences into windows, and puts each word's label on its first token;
    the encoder's `sequence_output` goes through dropout and a dense layer
    that gives one logit per label at every token. (The encoder's pooler is
    not used: it is left out of training and stays as it is.) Every word of
    a sentence gets a tag, however long the sentence.

    `fit` and `evaluate` take `(sentences, tags)`, where tags are label
    strings or ids, or a `tf.data.Dataset` of `(words, tags)` (unbatched, or
    batched with `ragged_batch`). `predict` returns each word's logits, one
    float32 array `(words, num_labels)` per sentence; `predict_proba` their
    softmax; `tag` one tag string per word; `evaluate_report` entity-level
    precision, recall and F1. `fit` batches sentences of similar word counts
    together, so short sentences train fast.

    Compiled as BERT fine-tunes: AdamW with warm-up and linear decay (see
    `kbert.Classifier`), sparse categorical cross-entropy on logits averaged
    over the first tokens, and their accuracy. Call `compile` to change it.

    Args:
        encoder: a `kbert.Encoder`.
        labels: the tag strings, in id order, e.g.
            `kbert.data.CONLL2003_LABELS` (or None when `preprocessor` is a
            `kbert.TaggerPreprocessor`, which holds them).
        preprocessor: a `kbert.TaggerPreprocessor`, or a `kbert.TextPacker`
            (wrapped into one): its tokenizer splits the words and its
            `sequence_length` is the window size.
        dropout: dropout before the output layer.

    Example:
    >>> vocab = kbert.learn_vocabulary(["Peter Blackburn visited Germany ."] * 10,
    ...                                vocabulary_size=60, lowercase=False, verbose=False)
    >>> ner = kbert.tagger("tiny", labels=kbert.data.CONLL2003_LABELS, vocabulary=vocab,
    ...                    lowercase=False, sequence_length=16)
    >>> history = ner.fit([["Peter", "Blackburn", "visited", "Germany"]],
    ...                   [["B-PER", "I-PER", "O", "B-LOC"]], epochs=1, verbose=0)
    >>> [logits.shape for logits in ner.predict([["Peter", "visited", "Germany", "."]])]
    [(4, 9)]
    >>> [len(tags) for tags in ner.tag([["Peter", "visited", "Germany", "."]])]
    [4]
    """

    uses_pooler = False  # outputs come from the sequence output

    def __init__(self, encoder, labels=None, preprocessor=None, dropout=0.1, **kwargs):
        kwargs.pop("text_pairs", None)  # saved by earlier versions
        encoder, preprocessor = encoder_and_preprocessor(
            encoder, preprocessor, _tagger_preprocessor, labels=labels
        )
        labels = list(head_setting(preprocessor, "labels", labels))

        # === Layers ===
        self.encoder = encoder
        self.output_dropout, self.output_dense = output_head(encoder, len(labels), "logits", dropout=dropout)

        # === Functional model ===
        inputs = encoder.input
        sequence = encoder(inputs)["sequence_output"]
        logits = self.output_dense(self.output_dropout(sequence))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.dropout = dropout
        self._labels = labels
        self._word_logits_function = None
        self.compile()

    def packed_call(self, inputs, training=None):
        """Logits `(rows, width, num_labels)` for a packed batch: every token's, each example's as alone."""
        sequence = self.encoder.packed_sequence_output(inputs, training=training)
        return self.output_dense(self.output_dropout(sequence, training=training))

    @property
    def labels(self):
        return self._labels if self.preprocessor is None else self.preprocessor.labels

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

    def predict(self, x, batch_size=None, verbose="auto"):
        """Label logits of every word: one float32 array `(words, num_labels)` per sentence.

        `x` is a list of sentences (lists of words) or a `tf.data.Dataset`
        of sentences (or of `(words, tags)`; the tags are ignored).
        """
        if is_token_ids(x):
            return super().predict(x, batch_size=batch_size, verbose=verbose)
        tf = require_tensorflow("Tagging words")
        from kbert.preprocessing.tagger_preprocessor import WORDS_SPEC

        preprocessor = self._raw_input_preprocessor()
        if self._word_logits_function is None:
            self._word_logits_function = tf.function(
                lambda words: self.preprocessor.word_logits(self, words),
                input_signature=[WORDS_SPEC],
                autograph=False,
            )

        def word_logits(words):
            if not words.row_lengths().numpy().sum():
                return tf.zeros([0, self.num_labels])
            return self._word_logits_function(words)

        batches = self._sentence_batches(x, batch_size or preprocessor.default_batch_size)
        results = []
        for words, flat in zip(batches, self._map_batches(word_logits, batches, verbose)):
            offsets = np.cumsum(words.row_lengths().numpy())[:-1]
            results.extend(np.split(flat, offsets))
        return results

    def predict_proba(self, x, batch_size=None, verbose="auto"):
        """Label probabilities of every word: one array `(words, num_labels)` per sentence."""
        return [softmax(logits) for logits in self.predict(x, batch_size=batch_size, verbose=verbose)]

    def tag(self, x, batch_size=None, verbose=0):
        """The most likely tag of every word: one list of tag strings per sentence.

        A sentence of `n` words always gets `n` tags, however long it is.
        """
        return [
            [self.labels[i] for i in logits.argmax(axis=-1)]
            for logits in self.predict(x, batch_size=batch_size, verbose=verbose)
        ]

    def predict_logits(self, x, batch_size=None, verbose="auto"):
        """Deprecated: `predict` gives the logits of every word."""
        deprecated("Tagger.predict_logits", "predict")
        return self.predict(x, batch_size=batch_size, verbose=verbose)

    def evaluate_report(self, sentences, tags, batch_size=None, verbose=0):
        """Entity-level precision, recall and F1 of the predicted tags, as conlleval counts them.

        Args:
            sentences: a list of sentences, each a list of words.
            tags: their true tags, label strings or ids, in IOB1 or IOB2.

        Returns:
            The dict of `kbert.metrics.entity_scores`: micro-averaged `precision`,
            `recall`, `f1`, counts, and `per_type` scores.
        """
        from kbert.preprocessing.tagger_words import as_sentences

        sentences = as_sentences(sentences)
        tag_ids = self._raw_input_preprocessor().tag_ids(tags, [len(s) for s in sentences])
        true_tags = [[self.labels[i] for i in ids] for ids in tag_ids]
        return entity_scores(true_tags, self.tag(sentences, batch_size=batch_size, verbose=verbose))

    evaluate_entities = evaluate_report

    def _sentence_batches(self, x, batch_size):
        """Ragged batches of words to predict on."""
        import tensorflow as tf

        from kbert.preprocessing.tagger_words import as_ragged, as_sentences, batched_sentences, ragged_rows

        if is_tf_dataset(x):
            dataset = batched_sentences(x, batch_size)
            if isinstance(dataset.element_spec, tuple):
                dataset = dataset.map(lambda words, *rest: words)
            return [as_ragged(words) for words in dataset]
        sentences = as_sentences(x)
        return [
            ragged_rows(sentences[start : start + batch_size], tf.string)
            for start in range(0, len(sentences), batch_size)
        ]

    def get_config(self):
        config = super().get_config()
        config["dropout"] = self.dropout
        if self.preprocessor is None:  # else the preprocessor holds them
            config["labels"] = list(self.labels)
        return config


def _tagger_preprocessor():
    from kbert.preprocessing.tagger_preprocessor import TaggerPreprocessor

    return TaggerPreprocessor
