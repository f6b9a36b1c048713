"""ALBERT's SentencePiece tokenizer as a Keras layer on TF-Text ops."""

import base64
import binascii
import functools
import os
import re
import sys
import unicodedata

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.preprocessing.base_tokenizer import BaseTokenizer, refuse_unsafe_config_value

PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word

# The characters Python's `str.split()` splits on.
_WHITESPACE = (
    r"[\t-\r\x1c-\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
    r"\x{205F}\x{3000}]"
)
# U+0001 marks a character that normalises to nothing (see `_preprocess`).
_DROPPED = "\x01"


@functools.cache
def _combining_pattern():
    """An RE2 class of the characters with a non-zero canonical combining class.

    These are what Python's `unicodedata.combining` flags, which the reference
    ALBERT tokenizer removes after NFKD; `\\p{Mn}` is not the same set.
    """
    ranges, start, previous = [], None, None
    for code in range(sys.maxunicode + 1):
        if unicodedata.combining(chr(code)):
            if start is None:
                start = code
            elif code != previous + 1:
                ranges.append((start, previous))
                start = code
            previous = code
    ranges.append((start, previous))
    return "[" + "".join(
        f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges
    ) + "]"


def read_proto(proto):
    """The bytes of a SentencePiece model given as bytes or as the path of a `spiece.model`."""
    if isinstance(proto, (bytes, bytearray)):
        return bytes(proto)
    if isinstance(proto, (str, os.PathLike)):
        path = os.fspath(proto)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"SentencePiece model not found: {path}")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    raise TypeError(
        f"`proto` must be the bytes of a SentencePiece model or a path, got {type(proto).__name__}."
    )


@keras.saving.register_keras_serializable(package="kbert")
class SentencePieceTokenizer(BaseTokenizer):
    """ALBERT's SentencePiece tokenizer, in the graph.

    Text is prepared as the reference ALBERT tokenizer prepares it (Hugging
    Face's `AlbertTokenizer` with `remove_space=True`), then split by
    TF-Text's SentencePiece op (`tf_text.SentencepieceTokenizer`) on the
    model, so ids equal the `sentencepiece` library's on the prepared text:

    1. Invalid UTF-8 is replaced (U+FFFD); `` `` `` and `''` become `"`.
    2. Whitespace runs become one space, leading and trailing ones go.
    3. With `strip_accents`, text is NFKD-normalised and combining marks
       are removed; with `lowercase`, it is lower-cased (a final capital
       sigma as `"ς"`, as Python does).
    4. SentencePiece splits the text, applying the model's own normalisation
       (NFKC for ALBERT's). A piece that ends in a digit and a comma
       (`"▁1999,"`) is split before the comma, as ALBERT's reference does.

    Special tokens written in the text (`"[MASK]"`) stay whole when
    `special_tokens_in_strings`; the text between them is tokenized on its
    own. Steps 1 to 3 run character by character, so
    `tokenize_with_offsets` maps every token back to the bytes of the
    input text it came from (QA answers).

    The model must have ALBERT's special pieces `<pad> <unk> [CLS] [SEP]
    [MASK]`. It is kept in the layer's config (base64), so a saved model
    or an export holds it. The ops are in TF Serving's TF-Text build
    (`SentencepieceOp`, `SentencepieceTokenizeOp`, ...).

    Args:
        proto: the SentencePiece model: its bytes, or the path of a
            `spiece.model`.
            A config (a `.keras` file) holds it as base64 text.
        lowercase: lower-case the text (ALBERT's models are uncased).
        strip_accents: remove accents; defaults to `lowercase`.
        special_tokens_in_strings: keep `[MASK]`, `[SEP]`, ... written in the
            text as single tokens.

    Example:
    >>> import io, sentencepiece
    >>> model = io.BytesIO()
    >>> sentencepiece.SentencePieceTrainer.train(
    ...     sentence_iterator=iter(["the cat sat on the mat.", "the cats sat."] * 20),
    ...     model_writer=model, vocab_size=30, model_type="bpe", pad_id=0, unk_id=1,
    ...     bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
    ...     minloglevel=2)
    >>> tokenizer = kbert.SentencePieceTokenizer(model.getvalue())
    >>> ids = tokenizer(["The Cats sat."])
    >>> [tokenizer.id_to_token(i) for i in ids[0].numpy()]
    ['▁the', '▁cats', '▁sat', '.']
    >>> tokenizer.detokenize(ids).numpy()
    array([b'the cats sat.'], dtype=object)
    """

    def __init__(self, proto, lowercase=True, strip_accents=None, special_tokens_in_strings=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.proto = read_proto(proto)
        self.lowercase = bool(lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.special_tokens_in_strings = bool(special_tokens_in_strings)
        try:
            self._sentence_piece = tf_text.SentencepieceTokenizer(
                model=self.proto, out_type=tf.int32
            )
            size = int(self._sentence_piece.vocab_size())
        except (tf.errors.InvalidArgumentError, tf.errors.InternalError) as error:
            raise ValueError(f"`proto` is not a SentencePiece model: {error.message}") from None
        pieces = self._sentence_piece.id_to_string(tf.range(size)).numpy()
        tokens = [piece.decode("utf-8") for piece in pieces]
        missing = [t for t in SPECIAL_TOKENS if t not in tokens]
        if missing:
            raise ValueError(
                f"The SentencePiece model lacks the special pieces {missing}; an ALBERT model "
                f"needs all of {list(SPECIAL_TOKENS)}."
            )
        self._set_vocabulary(tokens, PAD, UNK, CLS, SEP, MASK)
        self._special_pattern = "|".join(re.escape(t) for t in SPECIAL_TOKENS)
        self._comma_id = self._token_to_id.get(",", self.unk_token_id)

    def continuation_ids(self):
        """Ids of the pieces that continue a word, sorted.

        As in ALBERT's whole-word masking, a piece begins a word when it
        starts with `"▁"`, is a special token, or is punctuation only; every
        other piece continues the word before it.
        """
        special = set(self.special_token_ids)
        return [
            i for i, piece in enumerate(self.vocabulary)
            if i not in special and not piece.startswith(WORD_START)
            and not all(unicodedata.category(c).startswith("P") for c in piece)
        ]

    # Preprocessing.
    def _split_words(self, texts):
        """Whitespace-separated words (special tokens words of their own), with byte offsets."""
        if self.special_tokens_in_strings:
            words, starts, ends = tf_text.regex_split_with_offsets(
                texts, f"{_WHITESPACE}|{self._special_pattern}", self._special_pattern
            )
            special = tf.strings.regex_full_match(words.flat_values, self._special_pattern)
        else:
            words, starts, ends = tf_text.regex_split_with_offsets(texts, _WHITESPACE)
            special = tf.zeros_like(words.flat_values, tf.bool)
        return words, starts, ends, special

    def split_words(self, texts):
        """Splits a batch of texts into whitespace-separated words, with byte offsets.

        Returns:
            `(texts, words, starts, ends)`: the texts as the offsets index
            them (invalid UTF-8 replaced by U+FFFD), the words (a ragged
            string tensor, `(batch, (words))`) and each word's `[start,
            end)` byte offsets in its text.
        """
        texts, _ = self._batch(texts)
        words, starts, ends, _ = self._split_words(texts)
        return texts, words, starts, ends

    def _normalize_characters(self, chars):
        """Each character as the reference's preparation turns it (possibly into nothing)."""
        if self.strip_accents:
            chars = tf_text.normalize_utf8(chars, "NFKD")
            chars = tf.strings.regex_replace(chars, _combining_pattern(), "")
        if self.lowercase:
            chars = tf.strings.lower(chars, encoding="utf-8")
        return tf.strings.regex_replace(chars, _DROPPED, "")

    def _preprocess(self, texts):
        """Words and characters of `texts`, prepared for SentencePiece, with offsets.

        Returns a dict: `words` (ragged, per text), `word_starts`/`word_ends`
        (ragged byte offsets), `special` (flat, per word), `chars` (ragged,
        per word, the prepared characters), `char_starts`/`char_ends` (flat
        byte offsets into the text of each original character).
        """
        # "``" and "''" become '"' and a character dropped later, so every
        # other character keeps its byte offset.
        texts = tf.strings.regex_replace(texts, r"``|''", '"' + _DROPPED)
        words, word_starts, word_ends, special = self._split_words(texts)
        flat_words = words.flat_values
        if self.lowercase:
            # A capital sigma ending a word lower-cases to the final form.
            flat_words = tf.strings.regex_replace(flat_words, r"(\pL\pM*)Σ(\PL|$)", r"\1ς\2")
        chars, char_offsets = tf.strings.unicode_split_with_offsets(flat_words, "UTF-8")
        char_lengths = tf.cast(tf.strings.length(chars.flat_values), tf.int64)
        char_words = chars.value_rowids()
        normalized = self._normalize_characters(chars.flat_values)
        normalized = tf.where(tf.gather(special, char_words), chars.flat_values, normalized)
        word_start = tf.gather(word_starts.flat_values, char_words)
        char_starts = word_start + char_offsets.flat_values
        return {
            "words": words,
            "word_starts": word_starts,
            "word_ends": word_ends,
            "special": special,
            "chars": chars.with_flat_values(normalized),
            "char_starts": char_starts,
            "char_ends": char_starts + char_lengths,
        }

    def _segments(self, prepared):
        """The runs of words between special tokens, each joined by spaces for SentencePiece."""
        words, special = prepared["words"], prepared["special"]
        num_words = tf.size(special, tf.int64)
        word_rows = words.value_rowids()
        index = tf.range(num_words)
        first_in_text = tf.equal(index, tf.gather(words.row_starts(), word_rows))
        after_special = tf.concat([[False], special], axis=0)[:-1]
        new_segment = first_in_text | special | after_special
        word_segments = tf.math.cumsum(tf.cast(new_segment, tf.int64)) - 1
        num_segments = tf.reduce_sum(tf.cast(new_segment, tf.int64))
        normalized_words = tf.strings.reduce_join(prepared["chars"], axis=-1)
        segment_texts = tf.strings.unsorted_segment_join(
            normalized_words, word_segments, num_segments, separator=" "
        )
        segment_special = tf.math.unsorted_segment_max(
            tf.cast(special, tf.int32), word_segments, num_segments
        ) > 0
        segment_rows = tf.math.unsorted_segment_min(word_rows, word_segments, num_segments)
        return {
            "texts": segment_texts,
            "special": segment_special,
            "rows": segment_rows,
            "word_segments": word_segments,
            "normalized_words": normalized_words,
        }

    # Tokenization.
    def _sentence_piece_ids(self, texts, with_offsets):
        """SentencePiece's ids (and offsets) of prepared texts, ALBERT's digit-comma split applied."""
        if with_offsets:
            ids, starts, ends = self._sentence_piece.tokenize_with_offsets(texts)
        else:
            ids = self._sentence_piece.tokenize(texts)
        flat_ids = ids.flat_values
        pieces = self._sentence_piece.id_to_string(flat_ids)
        # ALBERT's reference re-splits "▁1999," into "▁1999" and ",".
        split = tf.strings.regex_full_match(pieces, r".*\p{Nd},")
        split_pieces = tf.boolean_mask(pieces, split)
        lengths = tf.strings.length(split_pieces)
        cores = tf.strings.regex_replace(
            tf.strings.substr(split_pieces, tf.zeros_like(lengths), lengths - 1), WORD_START, ""
        )
        core_ids = self._sentence_piece.tokenize(cores)
        first = core_ids[:, :1].flat_values
        first_piece = self._sentence_piece.id_to_string(first)
        # A piece inside a word keeps no word-start mark on its first part.
        inside_word = tf.logical_not(tf.strings.regex_full_match(split_pieces, WORD_START + ".*"))
        marked = tf.strings.regex_full_match(first_piece, WORD_START + ".*") & inside_word
        unmarked = tf.strings.regex_replace(first_piece, "^" + WORD_START, "")
        unmarked_ids = self._sentence_piece.string_to_id(unmarked)
        first_fixed = tf.where(marked, unmarked_ids, first)
        keep_first = tf.logical_not(marked & tf.equal(unmarked, ""))
        heads = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(first_fixed, keep_first), tf.cast(keep_first, tf.int64)
        )
        commas = tf.fill([tf.size(cores), 1], self._comma_id)
        replaced = tf.concat([heads, core_ids[:, 1:], tf.RaggedTensor.from_tensor(commas)], axis=1)
        singles = tf.RaggedTensor.from_tensor(tf.boolean_mask(flat_ids, ~split)[:, tf.newaxis])
        # Every piece becomes its row; split pieces take their replacement.
        split_rank = tf.math.cumsum(tf.cast(split, tf.int64), exclusive=True)
        single_rank = tf.math.cumsum(tf.cast(~split, tf.int64), exclusive=True)
        order = tf.where(split, tf.size(singles.flat_values, tf.int64) + split_rank, single_rank)
        per_piece = tf.gather(tf.concat([singles, replaced], axis=0), order)
        new_ids = ids.with_flat_values(per_piece).merge_dims(-2, -1)
        if not with_offsets:
            return new_ids
        # A split piece's parts cover it all but the comma, which covers its last byte.
        piece_starts, piece_ends = starts.flat_values, ends.flat_values
        part_piece = per_piece.value_rowids()
        is_comma = tf.logical_and(
            tf.gather(split, part_piece),
            tf.equal(tf.range(tf.size(part_piece, tf.int64)) + 1, tf.gather(per_piece.row_limits(), part_piece)),
        )
        part_ends = tf.gather(piece_ends, part_piece)
        part_starts = tf.where(is_comma, part_ends - 1, tf.gather(piece_starts, part_piece))
        part_ends = tf.where(tf.gather(split, part_piece) & ~is_comma, part_ends - 1, part_ends)
        new_starts = ids.with_flat_values(per_piece.with_flat_values(part_starts)).merge_dims(-2, -1)
        new_ends = ids.with_flat_values(per_piece.with_flat_values(part_ends)).merge_dims(-2, -1)
        return new_ids, new_starts, new_ends

    def _tokenize(self, texts, with_offsets):
        prepared = self._preprocess(texts)
        segments = self._segments(prepared)
        # Special tokens are not given to SentencePiece; they take their own id.
        sentence_piece_texts = tf.where(segments["special"], "", segments["texts"])
        if with_offsets:
            ids, starts, ends = self._sentence_piece_ids(sentence_piece_texts, True)
        else:
            ids = self._sentence_piece_ids(sentence_piece_texts, False)
        special_words = prepared["words"].flat_values
        special_segments = tf.boolean_mask(segments["word_segments"], prepared["special"])
        special_ids = tf.constant(self.special_token_ids, tf.int32)
        token_of_special = tf.gather(
            special_ids,
            tf.argmax(
                tf.equal(
                    tf.boolean_mask(special_words, prepared["special"])[:, tf.newaxis],
                    tf.constant([self.id_to_token(i) for i in self.special_token_ids]),
                ),
                axis=-1,
            ),
        )
        num_segments = tf.size(segments["special"], tf.int64)

        def with_specials(values, special_values):
            # At most one of the two rows of a segment is not empty.
            special_rows = tf.RaggedTensor.from_value_rowids(
                special_values, special_segments, nrows=num_segments
            )
            per_segment = tf.concat([values, special_rows], axis=1)
            per_text = tf.RaggedTensor.from_value_rowids(
                per_segment, segments["rows"], nrows=tf.size(texts, tf.int64)
            )
            return per_text.merge_dims(-2, -1)

        token_ids = with_specials(ids, token_of_special)
        if not with_offsets:
            return token_ids
        starts, ends = self._original_offsets(prepared, segments, ids, starts, ends)
        special_starts = tf.boolean_mask(prepared["word_starts"].flat_values, prepared["special"])
        special_ends = tf.boolean_mask(prepared["word_ends"].flat_values, prepared["special"])
        return token_ids, with_specials(starts, special_starts), with_specials(ends, special_ends)

    def _original_offsets(self, prepared, segments, ids, starts, ends):
        """Maps offsets into the prepared segment texts back to the input texts' bytes."""
        chars = prepared["chars"]
        char_words = chars.value_rowids()
        lengths = tf.cast(tf.strings.length(chars.flat_values), tf.int64)
        num_chars = tf.size(lengths, tf.int64)
        word_segments = segments["word_segments"]
        # A space precedes every word but the first of its segment.
        first_of_word = tf.equal(tf.range(num_chars), tf.gather(chars.row_starts(), char_words))
        previous_segment = tf.concat([[-1], word_segments], axis=0)[:-1]
        first_word_of_segment = tf.not_equal(word_segments, previous_segment)
        separator = tf.cast(
            first_of_word & ~tf.gather(first_word_of_segment, char_words), tf.int64
        )
        # Positions in the concatenation of all prepared segment texts.
        char_begin = tf.math.cumsum(lengths + separator, exclusive=True) + separator
        char_end = char_begin + lengths
        char_segments = tf.gather(word_segments, char_words)
        num_segments = tf.size(segments["special"], tf.int64)
        segment_lengths = tf.math.unsorted_segment_sum(lengths + separator, char_segments, num_segments)
        segment_base = tf.math.cumsum(segment_lengths, exclusive=True)
        segment_last_char = tf.math.unsorted_segment_max(
            tf.range(num_chars), char_segments, num_segments
        )

        token_segments = ids.value_rowids()
        base = tf.gather(segment_base, token_segments)
        begin = base + tf.cast(starts.flat_values, tf.int64)
        end = base + tf.cast(ends.flat_values, tf.int64)
        # The first character the token covers, and the last: a token's
        # leading "▁" may cover the space before a word, which maps nowhere.
        first_char = tf.searchsorted(char_end, begin, side="right", out_type=tf.int64)
        last_char = tf.searchsorted(char_begin, end, side="left", out_type=tf.int64) - 1
        segment_last = tf.gather(segment_last_char, token_segments)
        past_segment = first_char > segment_last
        first_char = tf.minimum(first_char, segment_last)
        last_char = tf.maximum(last_char, 0)

        # A character's extent runs on over the characters after it in its
        # word that prepare to nothing (combining accents, dropped marks).
        visible = tf.concat([tf.where(lengths > 0)[:, 0], [num_chars]], axis=0)
        next_index = tf.gather(visible, tf.searchsorted(visible, tf.range(num_chars) + 1, out_type=tf.int64))
        next_index_clipped = tf.minimum(next_index, num_chars - 1)
        same_word = (next_index < num_chars) & tf.equal(
            tf.gather(char_words, next_index_clipped), char_words
        )
        extent_end = tf.where(
            same_word,
            tf.gather(prepared["char_starts"], next_index_clipped),
            tf.gather(prepared["word_ends"].flat_values, char_words),
        )

        token_start = tf.gather(prepared["char_starts"], first_char)
        token_start = tf.where(past_segment, tf.gather(extent_end, segment_last), token_start)
        token_end = tf.gather(extent_end, last_char)
        # A token that covers no character (a lone "▁") is empty, where the next one starts.
        empty = past_segment | (last_char < first_char)
        token_end = tf.where(empty, token_start, token_end)
        return ids.with_flat_values(token_start), ids.with_flat_values(token_end)

    def call(self, texts):
        texts, scalar = self._batch(texts)
        token_ids = self._tokenize(texts, with_offsets=False)
        return token_ids[0] if scalar else token_ids

    def tokenize_with_offsets(self, texts):
        """Token ids and each token's `[start, end)` byte offsets into its text.

        Offsets index the UTF-8 bytes of the input (where the input has invalid
        UTF-8, of the input with each invalid sequence replaced by U+FFFD).
        A token covers whole characters, the space its `"▁"` stands for
        excluded; accents after its last character are included. A lone
        `"▁"` token covers nothing: its start and end are where the next
        token starts.
        """
        texts, scalar = self._batch(texts)
        token_ids, starts, ends = self._tokenize(texts, with_offsets=True)
        if scalar:
            return token_ids[0], starts[0], ends[0]
        return token_ids, starts, ends

    def _join_pieces(self, token_ids):
        # `"▁"` becomes the space between words.
        return self._sentence_piece.detokenize(token_ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "proto": base64.b64encode(self.proto).decode("ascii"),
                "lowercase": self.lowercase,
                "strip_accents": self.strip_accents,
                "special_tokens_in_strings": self.special_tokens_in_strings,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        proto = config.get("proto")
        if isinstance(proto, str):
            try:
                config["proto"] = base64.b64decode(proto, validate=True)
            except (binascii.Error, ValueError) as error:
                raise ValueError(
                    f"{cls.__name__} config's `proto` is not valid base64 ({error}), got "
                    f"{proto[:50]!r}{'...' if len(proto) > 50 else ''}."
                ) from None
        elif not isinstance(proto, (bytes, bytearray)):
            refuse_unsafe_config_value(cls, "proto", proto, "the base64 text of a SentencePiece model")
        return cls(**config)
