"""What every kbert tokenizer offers: vocabulary access, special token ids, batch handling."""

import tensorflow as tf
from keras.src.saving.serialization_lib import in_safe_mode

from kbert.preprocessing.preprocessing_layer import PreprocessingLayer, to_string_tensor

# The most bytes one character takes in UTF-8.
_MAX_UTF8_BYTES = 4


class BaseTokenizer(PreprocessingLayer):
    """The interface kbert's preprocessors, task models and exports rely on.

    `kbert.Tokenizer` (BERT's WordPiece) and `kbert.SentencePieceTokenizer`
    (ALBERT's) implement it, so every place that takes a tokenizer takes
    either. A subclass calls `_set_vocabulary` with its tokens and the
    names of its five special tokens, and implements `call` (a batch of
    texts to a ragged tensor of int32 ids), `tokenize_with_offsets`,
    `split_words`, `_join_pieces` (a ragged batch of ids to texts, for
    `detokenize`), `continuation_ids` and `get_config`.

    Attributes:
        pad_token_id, unk_token_id, cls_token_id, sep_token_id,
        mask_token_id: the ids of the special tokens.
        special_token_ids: those five ids, sorted.
    """

    def _set_vocabulary(self, tokens, pad, unk, cls, sep, mask):
        self.vocabulary = list(tokens)
        self._token_to_id = {}
        for i, token in enumerate(self.vocabulary):
            self._token_to_id.setdefault(token, i)
        self.pad_token_id = self._token_to_id[pad]
        self.unk_token_id = self._token_to_id[unk]
        self.cls_token_id = self._token_to_id[cls]
        self.sep_token_id = self._token_to_id[sep]
        self.mask_token_id = self._token_to_id[mask]
        self.special_token_ids = sorted(
            {self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id,
             self.mask_token_id}
        )

    # Vocabulary access.
    def vocabulary_size(self):
        return len(self.vocabulary)

    def get_vocabulary(self):
        return list(self.vocabulary)

    def token_to_id(self, token):
        if token not in self._token_to_id:
            raise KeyError(f"Token {token!r} is not in the vocabulary.")
        return self._token_to_id[token]

    def id_to_token(self, token_id):
        token_id = int(token_id)
        if not 0 <= token_id < len(self.vocabulary):
            raise IndexError(
                f"Token id {token_id} is outside the vocabulary [0, {len(self.vocabulary)})."
            )
        return self.vocabulary[token_id]

    def continuation_ids(self):
        """Ids of the pieces that continue a word, sorted (whole-word masking, QA answer widening)."""
        raise NotImplementedError

    def tokenize(self, texts):
        """Token ids of each text, a `tf.RaggedTensor` of int32."""
        return self(texts)

    # How many characters one token can span (`cut_texts`), and the runs of
    # characters that only separate words, which `cut_texts` makes one space.
    chars_per_token = 64
    separator_runs = None

    def cut_texts(self, texts, max_tokens):
        """Each text cut to the characters its first `max_tokens` tokens can span: a batch of strings.

        Tokenizing the cut texts gives the same first `max_tokens` tokens as
        the whole texts (for words of at most `chars_per_token - 1`
        characters), and the work, and memory, of tokenizing them is bounded
        by `max_tokens`, whatever the length of the text sent: a preprocessor
        that keeps `max_tokens` tokens cuts its texts first. Only the
        separator runs are read whole; every other step reads at most four
        bytes per character kept.
        """
        texts = self._string_batch(texts)
        limit = max_tokens * self.chars_per_token
        head = self._head(self._one_separator(texts), limit)
        return tf.strings.substr(head, 0, limit, unit="UTF8_CHAR")

    def bound_texts(self, texts, max_tokens):
        """Each text kept whole where its first `max_tokens` tokens can span all of it, else cut: a batch of strings.

        A text longer than the characters `max_tokens` tokens can span (see
        `cut_texts`) is cut as `cut_texts` cuts it, its separator runs made
        one space first. A text that fits is returned as it was sent, so
        character offsets into it, which the windowed tasks return, are
        unchanged. Either way the work of tokenizing it is bounded by
        `max_tokens`.
        """
        texts = self._string_batch(texts)
        limit = max_tokens * self.chars_per_token
        collapsed = self._one_separator(texts)
        head = self._head(collapsed, limit)
        # A text of more bytes than its head is longer than `limit` characters
        # however it is made valid, so its head decides.
        fits = tf.logical_and(tf.strings.length(collapsed) <= _MAX_UTF8_BYTES * limit,
                              tf.strings.length(head, unit="UTF8_CHAR") <= limit)
        # Only the texts that fit are made valid UTF-8 whole.
        whole = self._valid_utf8(tf.where(fits, texts, ""))
        return tf.where(fits, whole, tf.strings.substr(head, 0, limit, unit="UTF8_CHAR"))

    def _head(self, texts, limit):
        """The first `4 * limit` bytes of each text, made valid UTF-8: they hold its first `limit` characters.

        A character that the cut splits lies past the `limit`th, and so does
        the replacement character it becomes.
        """
        return self._valid_utf8(tf.strings.substr(texts, 0, _MAX_UTF8_BYTES * limit, unit="BYTE"))

    def _one_separator(self, texts):
        """Texts with each run of separator characters made one space (as many tokens)."""
        if self.separator_runs:
            return tf.strings.regex_replace(texts, self.separator_runs, " ")
        return texts

    # Input handling.
    def _batch(self, texts):
        """`(texts, scalar)`: a 1-D batch of valid UTF-8 strings, and whether the input was one text."""
        texts = to_string_tensor(texts)
        scalar = texts.shape.rank == 0
        return self._valid_utf8(self._string_batch(texts)), scalar

    def _string_batch(self, texts):
        """A 1-D batch of strings (a scalar made a batch of one), its bytes as sent."""
        texts = to_string_tensor(texts)
        name = type(self).__name__
        if isinstance(texts, tf.RaggedTensor):
            raise TypeError(f"{name} takes a dense batch of strings, not a ragged tensor.")
        if texts.shape.rank == 2 and texts.shape[-1] == 1:
            texts = tf.squeeze(texts, -1)
        if texts.shape.rank not in (0, 1):
            raise ValueError(
                f"{name} takes a string or a batch (1-D) of strings, got shape {texts.shape}."
            )
        if texts.shape.rank == 0:
            texts = texts[tf.newaxis]
        return texts

    @staticmethod
    def _valid_utf8(texts):
        """Texts with each invalid UTF-8 sequence made U+FFFD, and each NUL U+0001."""
        texts = tf.strings.unicode_transcode(
            texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        # Some TF string ops stop at NUL; U+0001 is dropped the same way and
        # keeps every byte offset.
        return tf.strings.regex_replace(texts, r"\x00", "\x01")

    def detokenize(self, token_ids, skip_special_tokens=True):
        """Joins token ids (one sequence, or a batch, ragged or padded) back into text."""
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.convert_to_tensor(token_ids)
        scalar = token_ids.shape.rank == 1
        if scalar:
            token_ids = token_ids[tf.newaxis]
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.RaggedTensor.from_tensor(token_ids)
        token_ids = tf.cast(token_ids, tf.int32)
        if skip_special_tokens:
            keep = tf.reduce_all(
                token_ids.flat_values[:, tf.newaxis] != tf.constant(self.special_token_ids),
                axis=-1,
            )
            token_ids = tf.ragged.boolean_mask(token_ids, token_ids.with_flat_values(keep))
        texts = self._join_pieces(token_ids)
        return texts[0] if scalar else texts


def refuse_unsafe_config_value(cls, key, value, expected):
    """Raises unless Keras safe mode is off: a config's `key` must be `expected`, not a path.

    A config never legitimately names a file (`get_config` writes the data
    itself), and reading one named in a model file would let the file make
    the loader read any path or URL (keras-team/keras#21751).
    """
    if in_safe_mode() is False:
        return
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    raise ValueError(
        f"{cls.__name__} config's `{key}` must be {expected}, got {shown}: a model file must carry "
        f"its {key} as {expected}, not a path; to load a trusted file, pass `safe_mode=False` (or "
        "call `keras.config.enable_unsafe_deserialization()`)."
    )
