"""The pretrainer's guesses for a few masked sentences, as text in TensorBoard."""

import keras

from kbert.callbacks.training_step import TrainingStepCallback
from kbert.callbacks.writers import LazyWriters


class FillMaskLogger(TrainingStepCallback):
    """Shows, while BERT pretrains, what it guesses for the `[MASK]` tokens of fixed sentences.

    Every `every` optimizer steps, and when training ends, the model being
    fitted (a `kbert.Pretrainer`) fills the masks of `sentences` with
    `kbert.fill_mask`, and the callback writes its top `top_k` tokens per
    mask as a table, the text `fill_mask` of the `train` run of `log_dir`,
    numbered by optimizer step like the `steps/...` curves. TensorBoard's Text
    tab then shows the guesses turning from frequent tokens into sensible
    words as the loss falls. `guesses` holds the last result (as `FillMask`
    returns it, one list per sentence).

    Args:
        log_dir: TensorBoard's log directory (that of the `TensorBoard`
            callback).
        sentences: texts with at least one `[MASK]` each.
        vocabulary: the tokens the pretrainer uses (a list or a `vocab.txt`
            path, or a SentencePiece `spiece.model`) or a ready tokenizer.
        lowercase: whether `vocabulary` is uncased.
        every: optimizer steps between tables.
        top_k: guesses shown per mask.

    Example:
    >>> import numpy as np, tempfile
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> pretrainer = kbert.Pretrainer(kbert.Encoder.from_preset("tiny", vocabulary_size=8))
    >>> logger = FillMaskLogger(tempfile.mkdtemp(), ["the [MASK] sat"], vocab, every=1, top_k=2)
    >>> logger.set_model(pretrainer)
    >>> logger.write(step=0)
    >>> [len(masks) for masks in logger.guesses], len(logger.guesses[0][0])
    ([1], 2)
    """

    def __init__(self, log_dir, sentences, vocabulary, lowercase=True, every=500, top_k=5):
        super().__init__()
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        if not sentences or not all(isinstance(s, str) for s in sentences):
            raise ValueError(f"`sentences` must be a non-empty list of strings, got {sentences!r}.")
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise ValueError(f"`every` must be a positive number of steps, got {every!r}.")
        self.log_dir = str(log_dir)
        self.sentences = sentences
        self.vocabulary = vocabulary
        self.lowercase = lowercase
        self.every = int(every)
        self.top_k = int(top_k)
        self.guesses = None
        self._writers = LazyWriters(self.log_dir)
        self._fill = None
        self._last_step = None

    def set_model(self, model):
        super().set_model(model)
        self._fill = None  # built for this model on first use

    def fill(self):
        """The model's guesses for the sentences now: per sentence, per mask, the top-k dicts."""
        from kbert.pretraining.fill_mask import fill_mask
        from kbert.pretraining.pretrainer import Pretrainer

        if not isinstance(self.model, Pretrainer):
            raise TypeError(f"FillMaskLogger needs a kbert.Pretrainer, got a {type(self.model).__name__}.")
        if self._fill is None:
            self._fill = fill_mask(self.model, vocabulary=self.vocabulary, top_k=self.top_k,
                                   lowercase=self.lowercase)
        return self._fill(self.sentences)

    def write(self, step):
        """Fills the masks now and writes the table at `step`."""
        import tensorflow as tf

        self.guesses = self.fill()
        rows = [["sentence", "mask", f"top {self.top_k} guesses (probability)"]]
        for sentence, masks in zip(self.sentences, self.guesses):
            for number, candidates in enumerate(masks, start=1):
                shown = ", ".join(f"{c['token']} ({c['score']:.3f})" for c in candidates)
                rows.append([sentence, str(number), shown])
        with self._writers.writing("train"):
            tf.summary.text("fill_mask", tf.constant(rows), step=step)
        self._last_step = step

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.iterations % self.every == 0:
            self.write(self.iterations)

    def on_train_end(self, logs=None):
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step != self._last_step:
            self.write(step)
        self._writers.close()
