"""Fill in the `[MASK]` tokens of a text with a pretrained masked-LM head."""

import numpy as np
import tensorflow as tf

from kbert.preprocessing.base_tokenizer import BaseTokenizer
from kbert.preprocessing.text_packer import TextPacker
from kbert.preprocessing.tokenizer_choice import tokenizer_from_vocabulary
from kbert.pretraining.pretrainer import Pretrainer


class FillMask:
    """Predicts the tokens hidden behind `[MASK]` in texts, as BERT was pretrained to.

    Each text is tokenized (the literal `[MASK]` stays one mask token),
    packed as `[CLS] text [SEP]` to `sequence_length` tokens, and run through
    the pretrainer's encoder and masked-LM head, a batch of texts per model
    call. For every `[MASK]` the result lists the `top_k` most likely tokens
    as dicts `{"token": str, "token_id": int, "score": float}`, most likely
    first. A score is a softmax probability over the candidate tokens.

    `[PAD]`, `[CLS]`, `[SEP]` and `[MASK]` are never candidates (their
    logits are set to -inf, so the scores of the other tokens sum to 1):
    predicting them is never useful. `[UNK]` stays a candidate. Tokens are
    vocabulary entries, so a word piece shows with its `##`.

    Calling it on one text returns one entry per `[MASK]` in the text, in
    order; calling it on a list of texts returns a list of such results.

    Args:
        pretrainer: a `kbert.Pretrainer`; its encoder and masked-LM head are
            used.
        tokenizer: the tokenizer (WordPiece or SentencePiece) the encoder was
            pretrained with.
        top_k: candidates listed per mask, at most the vocabulary size
            minus the 4 excluded special tokens.
        sequence_length: tokens per packed text (default 128, or the
            encoder's `max_sequence_length` when shorter); a `[MASK]` past it
            is an error.
        batch_size: texts per model call.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab))
    >>> fm = kbert.FillMask(kbert.Pretrainer(encoder), kbert.Tokenizer(vocab), top_k=2)
    >>> predictions = fm("the [MASK] sat")
    >>> len(predictions), len(predictions[0]), sorted(predictions[0][0])
    (1, 2, ['score', 'token', 'token_id'])
    """

    def __init__(self, pretrainer, tokenizer, top_k=5, sequence_length=None, batch_size=32):
        if not isinstance(pretrainer, Pretrainer):
            raise TypeError(
                f"`pretrainer` must be a kbert.Pretrainer, got {type(pretrainer).__name__}."
            )
        if not isinstance(tokenizer, BaseTokenizer):
            raise TypeError(
                "`tokenizer` must be a kbert.Tokenizer or kbert.SentencePieceTokenizer, got "
                f"{type(tokenizer).__name__}."
            )
        encoder = pretrainer.encoder
        vocabulary_size = tokenizer.vocabulary_size()
        if vocabulary_size != encoder.vocabulary_size:
            raise ValueError(
                f"The tokenizer has {vocabulary_size} tokens but the encoder embeds "
                f"{encoder.vocabulary_size}; use the vocabulary the model was pretrained with."
            )
        if sequence_length is None:
            sequence_length = min(128, encoder.max_sequence_length)
        if sequence_length > encoder.max_sequence_length:
            raise ValueError(
                f"`sequence_length` {sequence_length} exceeds the encoder's "
                f"`max_sequence_length` {encoder.max_sequence_length}."
            )
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        self.pretrainer = pretrainer
        self.tokenizer = tokenizer
        self.preprocessor = TextPacker(tokenizer, sequence_length)
        self.sequence_length = int(sequence_length)
        self.batch_size = int(batch_size)
        self.excluded_token_ids = sorted(
            {tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id}
        )
        self._logit_mask = np.zeros(vocabulary_size, "float32")
        self._logit_mask[self.excluded_token_ids] = -np.inf
        self.top_k = self._check_top_k(top_k)

    @property
    def num_candidates(self):
        """Tokens that can fill a mask: the vocabulary less the excluded special tokens."""
        return len(self._logit_mask) - len(self.excluded_token_ids)

    def _check_top_k(self, top_k):
        if int(top_k) != top_k or not 1 <= top_k <= self.num_candidates:
            raise ValueError(
                f"`top_k` must be an integer from 1 to {self.num_candidates} (the vocabulary's "
                f"{len(self._logit_mask)} tokens less {len(self.excluded_token_ids)} excluded "
                f"special tokens), got {top_k!r}."
            )
        return int(top_k)

    def __call__(self, texts, top_k=None):
        """The `top_k` candidates of each `[MASK]` in a text, or in each of a list of texts."""
        top_k = self.top_k if top_k is None else self._check_top_k(top_k)
        single = isinstance(texts, (str, bytes))
        texts = [texts] if single else list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, (str, bytes)):
                raise TypeError(f"Text {i} is a {type(text).__name__}, not a string: {text!r}.")
        results = []
        for start in range(0, len(texts), self.batch_size):
            results.extend(self._fill_batch(texts[start : start + self.batch_size], top_k))
        return results[0] if single else results

    def _fill_batch(self, texts, top_k):
        inputs, mask_positions, mask_counts = self._pack(texts)
        inputs["mask_positions"] = mask_positions
        # Masked-LM logits `(batch, masks, vocabulary)`, float32, in inference mode.
        logits = np.asarray(self.pretrainer.predict_on_batch(inputs)["mlm"], "float32") + self._logit_mask
        logits -= logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=-1, keepdims=True)
        # The top k by descending score, ties broken by token id.
        best = np.argsort(-probabilities, axis=-1, kind="stable")[..., :top_k]
        vocabulary = self.tokenizer.vocabulary
        return [
            [
                [
                    {
                        "token": vocabulary[token_id],
                        "token_id": int(token_id),
                        "score": float(probabilities[row, mask, token_id]),
                    }
                    for token_id in best[row, mask]
                ]
                for mask in range(count)
            ]
            for row, count in enumerate(mask_counts)
        ]

    def _pack(self, texts):
        """Model inputs, mask positions padded with 0, and masks per text."""
        mask_id = self.tokenizer.mask_token_id
        written = [
            int(n) for n in tf.reduce_sum(tf.cast(self.tokenizer(texts) == mask_id, tf.int32), -1)
        ]
        inputs = {name: value.numpy() for name, value in self.preprocessor(texts).items()}
        is_mask = inputs["token_ids"] == mask_id
        kept = is_mask.sum(axis=-1)
        for text, n_written, n_kept in zip(texts, written, kept):
            if n_written == 0:
                raise ValueError(
                    f"No [MASK] token in the text {text!r}; write [MASK] where a token "
                    "should be predicted."
                )
            if n_kept < n_written:
                raise ValueError(
                    f"A [MASK] of the text {text!r} falls past `sequence_length` "
                    f"{self.sequence_length} and was cut off; shorten the text or raise "
                    "`sequence_length`."
                )
        mask_positions = np.zeros((len(texts), int(kept.max())), "int32")
        for row, positions in enumerate(is_mask):
            positions = np.flatnonzero(positions)
            mask_positions[row, : len(positions)] = positions
        return inputs, mask_positions, [int(n) for n in kept]


def fill_mask(model, vocabulary=None, tokenizer=None, top_k=5, sequence_length=None, lowercase=True):
    """A `FillMask` that predicts the `[MASK]` tokens of texts with a pretrained model.

    Args:
        model: a `kbert.Pretrainer`.
        vocabulary: the tokens the model was pretrained with (a list or a
            `vocab.txt` path), a SentencePiece `spiece.model` path, or a ready
            tokenizer.
        tokenizer: a `kbert.Tokenizer` or `kbert.SentencePieceTokenizer`,
            instead of `vocabulary`.
        top_k: candidates listed per mask.
        sequence_length: tokens per packed text; default 128, or the
            encoder's `max_sequence_length` when that is shorter.
        lowercase: whether the vocabulary is uncased (with `vocabulary`).

    Returns:
        A `FillMask`: `fm("the [MASK] sat on the mat.")` lists, for each
        `[MASK]`, the `top_k` likeliest tokens with their scores.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    >>> pretrainer = kbert.Pretrainer(kbert.Encoder.from_preset("tiny", vocabulary_size=8))
    >>> fm = kbert.fill_mask(pretrainer, vocabulary=vocab, top_k=3)
    >>> [len(candidates) for candidates in fm("[MASK] cat [MASK]")]
    [3, 3]
    """
    if (vocabulary is None) == (tokenizer is None):
        raise ValueError(
            "Give either a `vocabulary` (a list of tokens or a vocab.txt path) or a `tokenizer`."
        )
    if tokenizer is None:
        tokenizer = tokenizer_from_vocabulary(vocabulary, lowercase=lowercase)
    return FillMask(model, tokenizer, top_k=top_k, sequence_length=sequence_length)
