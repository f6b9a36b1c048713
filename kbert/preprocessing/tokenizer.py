"""BERT's WordPiece tokenizer as a Keras layer on TF-Text ops."""

import os
import re

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.io.setting_error import SettingError
from kbert.io.text_files import read_text_lines
from kbert.preprocessing.base_tokenizer import BaseTokenizer, refuse_unsafe_config_value

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
# A vocabulary with at least this share of capitalised word tokens is cased.
_CASED_SHARE = 0.9
# The most tokens TF-Text's FastWordpieceTokenizer holds (a RuntimeError beyond).
MAX_VOCABULARY_SIZE = 1 << 22

# The character classes of BERT's basic tokenizer, as RE2 patterns.
_WHITESPACE = r"[\t\n\r\p{Z}]"
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_CJK = (
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)
# Control, format and private-use characters and U+FFFD are dropped, as the
# reference tokenizer's text cleaning does.
_DROPPED = r"[\p{C}\x{FFFD}]"


def read_vocabulary(vocabulary, lowercase=None):
    """Returns the tokens of a vocabulary given as a list or a `vocab.txt` path.

    A file is read as every kbert text file is (`kbert.io.text_files`): one
    token per line, LF, CRLF or CR line ends, a byte-order mark removed.

    Args:
        vocabulary: a list of tokens, or the path of a `vocab.txt`.
        lowercase: when given, whether the tokenizer that will use the
            vocabulary lower-cases text: with True, a vocabulary whose word
            tokens are (almost) all capitalised is refused.

    Raises:
        ValueError: the file is not UTF-8 or holds a NUL byte (a
            `DataFormatError` naming file and line); a token is empty, has
            surrounding whitespace, repeats or holds a NUL or a line break; a special token
            is missing; the casing does not fit `lowercase`; there are more
            than `MAX_VOCABULARY_SIZE` tokens (4,194,304, the most TF-Text's
            WordPiece tokenizer holds; a file is read no further).
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        path = os.fspath(vocabulary)
        local = os.path.exists(path)  # a local file, even with "://" in its name
        if not local and not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"Vocabulary file not found: {path}")
        if os.path.isdir(path) if local else tf.io.gfile.isdir(path):
            raise IsADirectoryError(f"{path} is a folder, not a vocabulary file.")
        tokens = []
        for number, line in read_text_lines(path):
            if number > MAX_VOCABULARY_SIZE:
                raise ValueError(f"{path}, line {number}: more than {MAX_VOCABULARY_SIZE:,} tokens, the most "
                                 "TF-Text's WordPiece tokenizer holds; refused before reading further.")
            tokens.append(line)
        source = path
    else:
        if hasattr(vocabulary, "__len__") and len(vocabulary) > MAX_VOCABULARY_SIZE:
            raise ValueError(f"The vocabulary list has {len(vocabulary):,} tokens, more than the "
                             f"{MAX_VOCABULARY_SIZE:,} TF-Text's WordPiece tokenizer holds.")
        tokens = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in vocabulary]
        source = "the vocabulary list"
        if len(tokens) > MAX_VOCABULARY_SIZE:
            raise ValueError(f"The vocabulary list has {len(tokens):,} tokens, more than the "
                             f"{MAX_VOCABULARY_SIZE:,} TF-Text's WordPiece tokenizer holds.")
    seen = {}
    for line, token in enumerate(tokens, start=1):
        if token == "" or token != token.strip():
            raise ValueError(
                f"{source}, line {line}: a token is empty or has surrounding whitespace: {token!r}."
            )
        if "\x00" in token:  # TF-Text's WordPiece cannot hold it
            raise ValueError(f"{source}, line {line}: a token holds a NUL character: {token!r}.")
        if any(end in token for end in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
            # vocab.txt holds a token a line: it would split in two there and number every later token wrong.
            raise ValueError(f"{source}, line {line}: a token holds a line break: {token!r}.")
        if token in seen:
            raise ValueError(
                f"{source}, line {line}: token {token!r} repeats line {seen[token]}."
            )
        seen[token] = line
    missing = [t for t in SPECIAL_TOKENS if t not in seen]
    if missing:
        raise ValueError(
            f"{source} lacks the special tokens {missing}; a BERT vocabulary needs all of "
            f"{list(SPECIAL_TOKENS)}."
        )
    if lowercase is not None:
        _check_casing(tokens, lowercase, source)
    return tokens


def _check_casing(tokens, lowercase, source):
    """Refuses to lower-case text for a vocabulary whose words are (almost) all capitalised.

    Lower-cased text never matches a token with a capital letter: with such a
    vocabulary nearly every word would become `[UNK]`, silently.
    """
    if not lowercase:
        return
    cased = capitalised = 0
    for token in tokens:
        if token in SPECIAL_TOKENS or (token.startswith("[") and token.endswith("]")):
            continue
        word = token.removeprefix("##")
        if word.lower() != word.upper():  # has a letter with case
            cased += 1
            capitalised += word.lower() != word
    if cased and capitalised >= _CASED_SHARE * cased:
        raise SettingError(
            f"{source}: {capitalised:,} of its {cased:,} word tokens have capital letters, which "
            "lower-cased text never matches (every word would become [UNK]); for a cased "
            "vocabulary pass `lowercase=False`.", {"lowercase=False": "cased"}
        )


def _is_token_list(vocabulary):
    return isinstance(vocabulary, (list, tuple)) and all(
        isinstance(token, (str, bytes)) for token in vocabulary
    )


@keras.saving.register_keras_serializable(package="kbert")
class Tokenizer(BaseTokenizer):
    """BERT's WordPiece tokenizer, in the graph.

    Text goes through BERT's basic tokenization, then WordPiece:

    1. Invalid UTF-8 is replaced (U+FFFD, then dropped), and control and
       format characters are removed.
    2. Text splits on whitespace; each punctuation mark and each CJK
       ideograph becomes a word of its own. Special tokens written in the
       text (`"[MASK]"`) stay whole when `special_tokens_in_strings`.
    3. Each word is optionally accent-stripped (NFD, combining marks removed)
       and lower-cased. Unlike TF-Text's `case_fold_utf8`, this applies no
       NFKC folding, so ids equal the reference BERT tokenizer's ("½" stays
       "½").
    4. TF-Text's `FastWordpieceTokenizer` splits each word into the longest
       vocabulary pieces (`##` marks a continuation); a word that cannot be
       split, or that is longer than `max_chars_per_word`, becomes `[UNK]`.

    Called on a batch of strings it returns a `tf.RaggedTensor` of token ids;
    `tokenize_with_offsets` also returns each token's byte offsets into the
    input text, so spans map back to the original characters (QA).

    Args:
        vocabulary: a list of tokens, or the path of a `vocab.txt` with one
            token per line. It must contain `[PAD] [UNK] [CLS] [SEP] [MASK]`.
            A config (a `.keras` file) holds the tokens; one naming a path
            loads only with Keras safe mode off.
        lowercase: lower-case the text (for "uncased" vocabularies). A
            vocabulary whose word tokens are (almost) all capitalised is
            refused with it: lower-cased text would match none of them.
        strip_accents: remove accents; defaults to `lowercase`, as BERT does.
        special_tokens_in_strings: keep `[MASK]`, `[SEP]`, ... written in the
            text as single tokens, so `"the [MASK] sat"` can be filled.
        max_chars_per_word: longer words become `[UNK]`.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...          "the", "cat", "sat", "on", "mat", "##s", "."]
    >>> tokenizer = kbert.Tokenizer(vocab)
    >>> tokenizer(["The cats sat."]).to_list()
    [[5, 6, 10, 7, 11]]
    >>> tokenizer.detokenize([[5, 6, 10]]).numpy()
    array([b'the cats'], dtype=object)
    """

    def __init__(
        self,
        vocabulary,
        lowercase=True,
        strip_accents=None,
        special_tokens_in_strings=True,
        max_chars_per_word=100,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.lowercase = bool(lowercase)
        self.vocabulary = read_vocabulary(vocabulary, lowercase=self.lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.special_tokens_in_strings = bool(special_tokens_in_strings)
        self.max_chars_per_word = int(max_chars_per_word)
        # A token is at most a word and the separator after it (`cut_texts`).
        self.chars_per_token = self.max_chars_per_word + 1
        self.separator_runs = _WHITESPACE + "+"

        self._set_vocabulary(self.vocabulary, PAD, UNK, CLS, SEP, MASK)

        keep = [_PUNCTUATION, _CJK]
        special = "|".join(re.escape(t) for t in SPECIAL_TOKENS)
        if self.special_tokens_in_strings:
            keep.insert(0, special)  # RE2 alternation is leftmost-first.
        self._special_pattern = special
        self._keep_pattern = "|".join(keep)
        self._split_pattern = "|".join(keep + [_WHITESPACE])
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary,
            suffix_indicator="##",
            # Words are limited in characters above; this only bounds bytes.
            max_bytes_per_word=4 * self.max_chars_per_word + 4,
            token_out_type=tf.int32,
            unknown_token=UNK,
            no_pretokenization=True,
            support_detokenization=True,
        )

    def continuation_ids(self):
        """Ids of the pieces that continue a word (`##` pieces), for whole-word and n-gram masking."""
        return [i for i, token in enumerate(self.vocabulary) if token.startswith("##")]

    # Tokenization.
    def _normalize(self, strings, special):
        """Normalizes a flat tensor of words or characters."""
        normalized = strings
        if self.strip_accents:
            normalized = tf_text.normalize_utf8(normalized, "NFD")
            normalized = tf.strings.regex_replace(normalized, r"\p{Mn}", "")
        if self.lowercase:
            # The reference lower-cases character by character, so a final
            # capital sigma becomes "σ", not the contextual "ς" ICU gives.
            normalized = tf.strings.regex_replace(normalized, "Σ", "σ")
            normalized = tf.strings.lower(normalized, encoding="utf-8")
        normalized = tf.strings.regex_replace(normalized, _DROPPED, "")
        return tf.where(special, strings, normalized)

    def _split_words(self, texts):
        words, starts, ends = tf_text.regex_split_with_offsets(
            texts, self._split_pattern, self._keep_pattern
        )
        special = tf.strings.regex_full_match(words.flat_values, self._special_pattern)
        if not self.special_tokens_in_strings:
            special = tf.zeros_like(special)
        return words, starts, ends, special

    def split_words(self, texts):
        """Splits a batch of texts into words as the tokenizer sees them, with byte offsets.

        Words are split on whitespace, and every punctuation mark (and CJK
        character) is a word of its own, before any normalisation.

        Returns:
            `(texts, words, starts, ends)`: the texts as the offsets index
            them (invalid UTF-8 replaced by U+FFFD), the words (a ragged
            string tensor, `(batch, (words))`) and each word's `[start,
            end)` byte offsets in its text.
        """
        texts, _ = self._batch(texts)  # a single text becomes a batch of one
        words, starts, ends, _ = self._split_words(texts)
        return texts, words, starts, ends

    def _limit_word_length(self, words):
        too_long = tf.strings.length(words, unit="UTF8_CHAR") > self.max_chars_per_word
        return tf.where(too_long, tf.constant(UNK), words)

    def pre_tokenize(self, texts):
        """The normalised words that WordPiece splits, a ragged string tensor.

        Vocabulary learning counts these, so a learned vocabulary fits exactly
        the text this tokenizer produces.
        """
        texts, scalar = self._batch(texts)
        words = self._normalized_words(texts)
        return words[0] if scalar else words

    def _normalized_words(self, texts):
        words, _, _, special = self._split_words(texts)
        return words.with_flat_values(self._normalize(words.flat_values, special))

    def call(self, texts):
        texts, scalar = self._batch(texts)
        words = self._normalized_words(texts)
        pieces = self._wordpiece.tokenize(self._limit_word_length(words.flat_values))
        token_ids = words.with_flat_values(pieces).merge_dims(-2, -1)
        return token_ids[0] if scalar else token_ids

    def tokenize_with_offsets(self, texts):
        """Token ids and each token's `[start, end)` byte offsets into its text.

        Offsets index the UTF-8 bytes of the input (where the input has invalid
        UTF-8, of the input with each invalid sequence replaced by U+FFFD).
        A token covers whole characters: the first piece of a word starts at
        the word's first character and the last piece ends after its last,
        accents and dropped characters included.
        """
        texts, scalar = self._batch(texts)
        words, word_starts, word_ends, special = self._split_words(texts)
        flat_words = words.flat_values

        # Normalise character by character, so that positions in a normalised
        # word map back to the characters they came from.
        chars, char_starts = tf.strings.unicode_split_with_offsets(flat_words, "UTF-8")
        char_ends = char_starts.flat_values + tf.cast(
            tf.strings.length(chars.flat_values, "BYTE"), tf.int64
        )
        char_words = chars.value_rowids()
        normalized_chars = self._normalize(chars.flat_values, tf.gather(special, char_words))
        normalized_lengths = tf.strings.length(normalized_chars, "BYTE")
        normalized = tf.strings.reduce_join(
            chars.with_flat_values(normalized_chars), axis=-1
        )
        normalized = self._limit_word_length(normalized)
        pieces, piece_starts, piece_ends = self._wordpiece.tokenize_with_offsets(normalized)

        # Global positions in the concatenation of all normalised characters.
        char_positions = tf.math.cumsum(tf.cast(normalized_lengths, tf.int64), exclusive=True)
        word_lengths = tf.math.unsorted_segment_sum(
            tf.cast(normalized_lengths, tf.int64), char_words, tf.size(flat_words, tf.int64)
        )
        word_positions = tf.math.cumsum(word_lengths, exclusive=True)
        piece_words = pieces.value_rowids()
        piece_base = tf.gather(word_positions, piece_words)
        starts_in_piece = piece_starts.flat_values
        ends_in_piece = piece_ends.flat_values

        def char_at(position):
            # The last character starting at or before `position`: characters
            # that normalise to nothing share a start with the next one.
            index = tf.searchsorted(char_positions[tf.newaxis], position[tf.newaxis], side="right")
            return tf.maximum(index[0] - 1, 0)

        start_char = char_at(piece_base + starts_in_piece)
        end_char = char_at(piece_base + ends_in_piece - 1)
        word_start = tf.gather(word_starts.flat_values, piece_words)
        word_end = tf.gather(word_ends.flat_values, piece_words)
        normalized_length = tf.gather(tf.strings.length(normalized, "BYTE"), piece_words)
        start = tf.where(
            starts_in_piece == 0,
            word_start,
            word_start + tf.gather(char_starts.flat_values, start_char),
        )
        end = tf.where(
            tf.cast(ends_in_piece, tf.int32) >= normalized_length,
            word_end,
            word_start + tf.gather(char_ends, end_char),
        )

        def per_text(values):
            return words.with_flat_values(pieces.with_flat_values(values)).merge_dims(-2, -1)

        token_ids, starts, ends = per_text(pieces.flat_values), per_text(start), per_text(end)
        if scalar:
            return token_ids[0], starts[0], ends[0]
        return token_ids, starts, ends

    def _join_pieces(self, token_ids):
        # Words separated by spaces, `##` pieces joined to the word before.
        return self._wordpiece.detokenize(token_ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": self.get_vocabulary(),
                "lowercase": self.lowercase,
                "strip_accents": self.strip_accents,
                "special_tokens_in_strings": self.special_tokens_in_strings,
                "max_chars_per_word": self.max_chars_per_word,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        vocabulary = config.get("vocabulary")
        if not _is_token_list(vocabulary):
            refuse_unsafe_config_value(cls, "vocabulary", vocabulary, "a list of tokens")
        return cls(**config)
