"""Attention heat maps of a BERT encoder for one sentence, in TensorBoard."""

import keras
import numpy as np

from kbert.callbacks.images import CARD_WIDTH, heat_map, padded_batch
from kbert.callbacks.training_step import TrainingStepCallback
from kbert.callbacks.writers import LazyWriters


def attention_scores(encoder, inputs):
    """The attention probabilities of every Transformer block and head of a `kbert.Encoder`.

    Runs the encoder in inference mode block by block, each keras-hub
    `TransformerEncoder` called with `return_attention_scores=True` on the
    previous block's output (the first on the embeddings), so the scores
    are those of the encoder's own computation.

    Args:
        encoder: a `kbert.Encoder`.
        inputs: a dict of `token_ids`, `segment_ids` and `padding_mask`,
            each `(batch, sequence)`.

    Returns:
        A list with one float32 array `(batch, heads, query, key)` per block:
        `[l][b, h, i, j]` is how much token `i` attends to token `j` in head
        `h` of block `l`; each row sums to 1 over the real tokens, padding
        gets 0.

    Example:
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=10)
    >>> inputs = {"token_ids": np.array([[2, 5, 6, 3]]), "segment_ids": np.zeros((1, 4), "int32"),
    ...           "padding_mask": np.ones((1, 4), "int32")}
    >>> scores = attention_scores(encoder, inputs)
    >>> len(scores), scores[0].shape
    (2, (1, 2, 4, 4))
    """
    token_ids = keras.ops.convert_to_tensor(inputs["token_ids"], "int32")
    segment_ids = keras.ops.convert_to_tensor(inputs["segment_ids"], "int32")
    padding_mask = keras.ops.convert_to_tensor(inputs["padding_mask"], "int32")
    x = encoder.embed(token_ids, segment_ids, training=False)
    scores = []
    for blocks in encoder.layer_blocks:
        for layer in blocks:
            x, layer_scores = layer(
                x, padding_mask=padding_mask, training=False, return_attention_scores=True
            )
        # A layer's map is that of its last block (ALBERT groups may hold several).
        scores.append(np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(layer_scores, "float32"))))
    return scores


class AttentionMapLogger(TrainingStepCallback):
    """Draws where each attention head of the encoder looks, for one sentence, during `fit`.

    For every Transformer block `l` the callback writes one image summary
    `self_attention/layer_<l>` to the `train` run of `log_dir`, holding one
    heat map per head as its samples. TensorBoard's Time Series shows each
    head as a card of its own ("Sample 1/12" is head 0), whose slider picks
    the step; all heads of a block are drawn at one size, at least 400
    pixels wide. Row `i` of a head's map shows how token `i` of
    the sentence spreads its attention over the tokens (columns). Each head
    has its own colour scale, from pale yellow at its least attention to
    dark blue at its most, the two numbers written at the ends of its colour
    bar: a head that attends almost evenly still shows its structure. The
    sentence is packed as BERT reads it (`[CLS] text [SEP]`, or a pair), and
    its tokens label the rows and columns. A short sentence reads best:
    cells shrink to 14 pixels as tokens are added, so a long one makes a
    wide image that TensorBoard scales down.

    The images are written at every epoch end (numbered by epoch), or with
    `every=N` every N optimizer steps and when training ends (numbered by
    optimizer step). Works with any model that has an `encoder` (task
    models, the pretrainer) or is a `kbert.Encoder`.

    Args:
        log_dir: TensorBoard's log directory (that of the `TensorBoard`
            callback).
        text: the sentence, or a `(text_a, text_b)` pair.
        vocabulary: the encoder's tokens (a list or a `vocab.txt` path, or a
            SentencePiece `spiece.model`) or a ready tokenizer; default: the tokenizer of the model's
            preprocessor (task models have one).
        lowercase: whether `vocabulary` is uncased.
        every: optimizer steps between images, or `"epoch"`.
        sequence_length: the longest packing of `text` (default 64).

    Example:
    >>> import tempfile
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab))
    >>> logger = AttentionMapLogger(tempfile.mkdtemp(), "the cat sat", vocabulary=vocab)
    >>> tokens, scores = logger.attention(encoder)   # during `fit`: the fitted model's
    >>> tokens, len(scores), scores[0].shape
    (['[CLS]', 'the', 'cat', 'sat', '[SEP]'], 2, (2, 5, 5))
    >>> images = logger.images(encoder)   # what `write` puts in TensorBoard
    >>> sorted(images), images["self_attention/layer_0"].shape[0]   # one image per head
    (['self_attention/layer_0', 'self_attention/layer_1'], 2)

    In `fit`: `model.fit(..., callbacks=[AttentionMapLogger("logs", "the cat sat")])`.
    """

    def __init__(self, log_dir, text, vocabulary=None, lowercase=True, every="epoch", sequence_length=64):
        super().__init__()
        if every != "epoch" and (isinstance(every, bool) or int(every) != every or every < 1):
            raise ValueError(f"`every` must be a positive number of steps or 'epoch', got {every!r}.")
        if not isinstance(text, (str, tuple, list)) or (
            not isinstance(text, str) and (len(text) != 2 or not all(isinstance(t, str) for t in text))
        ):
            raise TypeError(f"`text` must be a string or a (text_a, text_b) pair of strings, got {text!r}.")
        self.log_dir = str(log_dir)
        self.text = text if isinstance(text, str) else tuple(text)
        self.vocabulary = vocabulary
        self.lowercase = lowercase
        self.every = every
        self.sequence_length = int(sequence_length)
        self._writers = LazyWriters(self.log_dir)
        self._last_step = None

    def attention(self, model=None):
        """`(tokens, scores)`: the packed sentence's tokens, and per block an array `(heads, tokens, tokens)`."""
        from kbert.preprocessing.text_packer import TextPacker

        model = self.model if model is None else model
        encoder = _encoder_of(model)
        tokenizer = self._tokenizer(model)
        sequence_length = min(self.sequence_length, encoder.max_sequence_length)
        texts = [self.text] if isinstance(self.text, str) else ([self.text[0]], [self.text[1]])
        packed = TextPacker(tokenizer, sequence_length)(texts)
        length = int(np.asarray(packed["padding_mask"]).sum())
        # Only the real tokens: without padding the maps are exactly token by token.
        inputs = {name: np.asarray(value)[:, :length] for name, value in packed.items()}
        tokens = [tokenizer.id_to_token(int(i)) for i in inputs["token_ids"][0]]
        return tokens, [layer_scores[0] for layer_scores in attention_scores(encoder, inputs)]

    def images(self, model=None):
        """`{tag: uint8 array (heads, height, width, 3)}`: one image per head for each block.

        The tags are `self_attention/layer_<l>`. Each head's map is coloured
        from its own least to its most attention, both written on its
        colour bar; the heads of a block are padded to one size.
        """
        tokens, scores = self.attention(model)
        labels = [token if len(token) <= 14 else token[:13] + "…" for token in tokens]
        images = {}
        for number, layer_scores in enumerate(scores):
            heads = [
                heat_map(head, labels, labels, title=f"layer {number}, head {h}",
                         row_title="query", column_title="key",
                         colour_range=(float(head.min()), float(head.max())), colour_bar="attention",
                         min_width=CARD_WIDTH)
                for h, head in enumerate(layer_scores)
            ]
            # One summary holds the heads as its samples, which must share one size.
            images[f"self_attention/layer_{number}"] = padded_batch(heads)
        return images

    def write(self, step):
        """Writes one image summary per block at `step`, its samples the heads."""
        import tensorflow as tf

        images = self.images()
        with self._writers.writing("train"):
            for number, (tag, heads) in enumerate(images.items()):
                tf.summary.image(
                    tag, heads, max_outputs=len(heads), step=step,
                    description=f"Block {number}, one card per head (Sample k is head k - 1; the slider picks "
                                "the step): "
                                "row i is where token i attends (columns), from pale yellow at the "
                                "head's least attention to dark blue at its most, the two numbers "
                                f"on the colour bar. Text: {self.text!r}",
                )
        self._last_step = step

    def on_train_batch_end(self, batch, logs=None):
        if self.every == "epoch":
            return
        super().on_train_batch_end(batch, logs)
        if self.iterations % self.every == 0:
            self.write(self.iterations)

    def on_epoch_end(self, epoch, logs=None):
        if self.every == "epoch":
            self.write(epoch)

    def on_train_end(self, logs=None):
        if self.every != "epoch":
            step = _optimizer_step(self.model)
            if step != self._last_step:
                self.write(step)
        self._writers.close()

    def _tokenizer(self, model):
        from kbert.preprocessing.tokenizer_choice import tokenizer_from_vocabulary

        if self.vocabulary is not None:
            self.vocabulary = tokenizer_from_vocabulary(self.vocabulary, lowercase=self.lowercase)
            return self.vocabulary
        preprocessor = getattr(model, "preprocessor", None)
        if preprocessor is None or not hasattr(preprocessor, "tokenizer"):
            raise ValueError(
                f"The {type(model).__name__} has no preprocessor to tokenize the sentence; give the "
                "`vocabulary` it was trained with."
            )
        return preprocessor.tokenizer


def _encoder_of(model):
    from kbert.models.encoder import Encoder

    encoder = model if isinstance(model, Encoder) else getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        raise TypeError(
            f"AttentionMapLogger needs a kbert.Encoder or a model with one as `encoder`, got a "
            f"{type(model).__name__}."
        )
    return encoder


def _optimizer_step(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))
