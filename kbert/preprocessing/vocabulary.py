"""Learning a WordPiece vocabulary from raw text."""

import collections
import os
import time

import numpy as np
import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from kbert.io.progress_bar import progress_bar
from kbert.io.text_files import read_text_lines
from kbert.preprocessing.tokenizer import MAX_VOCABULARY_SIZE, SPECIAL_TOKENS, Tokenizer

# The text tokenized at a time while counting words.
_BATCH_BYTES = 1 << 20


def _glob_all(patterns):
    """The files the patterns match, or None if any pattern matches nothing."""
    files = []
    for pattern in patterns:
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            return None
        files.extend(matches)
    return files


def _matched_files(files):
    patterns = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    patterns = [os.fspath(p) for p in patterns]
    matched = _glob_all(patterns)
    if matched is None:
        missing = [p for p in patterns if not tf.io.gfile.glob(p)]
        raise FileNotFoundError(f"The pattern {missing[0]!r} matches no file.")
    return matched


def _file_batches(files, batch_size):
    """Batches of the files' lines: at most `batch_size` lines and `_BATCH_BYTES` bytes.

    Lines are read as every kbert text file is (`kbert.io.text_files`); a line
    longer than a batch (a book without line ends) comes in pieces cut at
    spaces, which gives the same words. Memory is bounded by the bytes of a
    batch, not by its number of lines.
    """
    batch, size = [], 0
    for path in files:
        for _, line in read_text_lines(path, long_lines="split", allow_empty=True,
                                       max_line_bytes=_BATCH_BYTES):
            line_bytes = len(line.encode("utf-8"))
            if batch and (len(batch) >= batch_size or size + line_bytes > _BATCH_BYTES):
                yield tf.constant(batch)
                batch, size = [], 0
            batch.append(line)
            size += line_bytes
    if batch:
        yield tf.constant(batch)


def _text_batches(data, files, batch_size):
    """Batches of texts (a dataset or a generator), and the number of texts when it is known."""
    if files is not None:
        return _file_batches(files, batch_size), None
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if isinstance(spec, tuple):  # (texts, labels): learn from the texts.
            data = data.map(lambda *element: element[0])
            spec = data.element_spec
        if not isinstance(spec, tf.TensorSpec) or spec.dtype != tf.string:
            raise TypeError(f"The dataset must yield strings, got elements of {spec}.")
        if spec.shape.rank == 0:
            data = data.batch(batch_size)
        return data, None
    if isinstance(data, (str, bytes)):
        raise TypeError("Pass a list of texts or of file patterns, not a single string.")
    texts = np.asarray(list(data), dtype=object)
    return tf.data.Dataset.from_tensor_slices(texts.astype(str)).batch(batch_size), len(texts)


def learn_vocabulary(
    data=None,
    vocabulary_size=30522,
    lowercase=True,
    strip_accents=None,
    files=None,
    max_unique_characters=1000,
    batch_size=1024,
    verbose=True,
):
    """Learns a WordPiece vocabulary from raw text with TF-Text's learner.

    Words are counted exactly as `kbert.Tokenizer` splits and normalises them
    (same lower-casing, accents, punctuation and CJK rules), then TF-Text's
    `wordpiece_tokenizer_learner_lib` picks the pieces. The result starts with
    `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0 to 4).

    Args:
        data: a list or array of texts, a `tf.data.Dataset` of texts (or of
            `(text, label)`), or a list of file paths or glob patterns (every
            one matching files), read one text per line as every kbert text
            file is (`kbert.io.text_files`: LF, CRLF or CR line ends; invalid
            UTF-8 or a NUL byte is an error naming file and line).
        vocabulary_size: the number of tokens to learn. The result has
            exactly this many, unless the text has fewer distinct pieces
            (then all of them), or the special tokens and the alphabet
            (each character alone and as a `##` continuation) alone are
            more (then those).
        lowercase, strip_accents: as for `kbert.Tokenizer`; use the same
            values for the tokenizer that uses the vocabulary.
        files: file paths or glob patterns, instead of `data`.
        max_unique_characters: the alphabet size; words with rarer
            characters are not counted (they become `[UNK]`).
        batch_size: the most texts tokenized at a time while counting
            (files are also read in batches of at most 1 MiB).
        verbose: show progress.

    Returns:
        The vocabulary, a list of tokens; `kbert.Tokenizer` takes it as is.

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat", "the dog sat"], vocabulary_size=50, verbose=False)
    >>> vocab[:5]
    ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    """
    if data is None and files is None:
        raise ValueError("Give the text to learn from: `data` (texts or files) or `files`.")
    if int(vocabulary_size) <= len(SPECIAL_TOKENS):
        raise ValueError(f"`vocabulary_size` must exceed {len(SPECIAL_TOKENS)}, got {vocabulary_size}.")
    if int(vocabulary_size) > MAX_VOCABULARY_SIZE:
        raise ValueError(f"`vocabulary_size` must be at most {MAX_VOCABULARY_SIZE:,}, the most TF-Text's WordPiece "
                         f"tokenizer holds, got {vocabulary_size}.")
    if files is None and isinstance(data, (list, tuple)) and data and all(
        isinstance(d, str) and "\n" not in d for d in data
    ):
        # A list in which every entry names existing files is a list of files.
        if _glob_all(data) is not None:
            files, data = data, None
    if files is not None:
        files = _matched_files(files)
    batches, total = _text_batches(data, files, batch_size)

    pre_tokenizer = Tokenizer(
        list(SPECIAL_TOKENS), lowercase=lowercase, strip_accents=strip_accents
    )
    progress = progress_bar(total, unit_name="text") if verbose else None
    counts = collections.Counter()
    texts_seen = 0
    for batch in batches:
        words = pre_tokenizer.pre_tokenize(batch).flat_values.numpy()
        unique, frequency = np.unique(words, return_counts=True)
        counts.update(dict(zip(unique.tolist(), frequency.tolist())))
        texts_seen += int(tf.size(batch))
        if progress:
            progress.update(texts_seen)
    if progress and total is None:
        progress.target = texts_seen
        progress.update(texts_seen, finalize=True)
    for token in SPECIAL_TOKENS:
        counts.pop(token.encode(), None)
    if not counts:
        if files is not None:
            shown = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more files)"
            raise ValueError(f"{shown}: no words to learn a vocabulary from: the text is empty or blank.")
        raise ValueError(f"No words to learn from: the {texts_seen} texts given are empty.")

    if verbose:
        print(f"Learning WordPiece pieces from {len(counts):,} distinct words ...", flush=True)
    start = time.time()
    word_counts = [(word.decode("utf-8"), count) for word, count in counts.items()]
    vocabulary = _learn_to_size(word_counts, int(vocabulary_size), max_unique_characters)
    if verbose:
        line = f"Learned {len(vocabulary):,} tokens in {time.time() - start:.1f} s"
        if len(vocabulary) < int(vocabulary_size):
            line += " (all the text gives: every piece seen at least once is in)"
        elif len(vocabulary) > int(vocabulary_size):
            line += (f" (more than {int(vocabulary_size):,}: the special tokens and every "
                     "character, alone and as a ## continuation, must be in)")
        print(line + ".", flush=True)
    return vocabulary


def _learn_to_size(word_counts, vocabulary_size, max_unique_characters):
    """TF-Text's WordPiece learner, made to give `vocabulary_size` tokens.

    The learner keeps the pieces seen at least `threshold` times, and its own
    search for the threshold stops anywhere within 5 % below the size, or
    above it when no threshold lands there (one more count can drop hundreds
    of pieces). Here the search finds the highest threshold that gives at
    least `vocabulary_size` tokens, and the least frequent pieces are then
    dropped down to the size: the learner lists its pieces by count, so this
    is the same cut a threshold between two counts would make. Every
    character stays, alone and as a `##` continuation, so any word of the
    alphabet can still be tokenized.
    """
    params = learner.Params(
        upper_thresh=int(1e7), lower_thresh=1, num_iterations=4, max_input_tokens=int(5e6),
        max_token_length=50, max_unique_chars=max_unique_characters,
        vocab_size=vocabulary_size, slack_ratio=0.0, include_joiner_token=True, joiner="##",
        reserved_tokens=list(SPECIAL_TOKENS),
    )
    upper, lower = learner.get_search_threshs(word_counts, params.upper_thresh, params.lower_thresh)
    words = learner.get_input_words(word_counts, params.reserved_tokens, params.max_token_length)
    words = learner.filter_input_words(
        words, learner.get_allowed_chars(words, params.max_unique_chars), params.max_input_tokens
    )
    learned = {}  # threshold -> vocabulary

    def learn(threshold):
        if threshold not in learned:
            learned[threshold] = learner.learn_with_thresh(words, threshold, params)
        return learned[threshold]

    # Vocabulary size falls as the threshold rises; find the highest threshold
    # that still gives enough tokens (or the lowest, 1, when none does).
    if len(learn(lower)) >= vocabulary_size:
        while lower < upper:
            middle = (lower + upper + 1) // 2
            size = len(learn(middle))
            if size >= vocabulary_size:
                lower = middle
                if size <= vocabulary_size * 1.05:
                    break  # close enough: the cut below drops only the rarest
            else:
                upper = middle - 1
    return _cut(learn(lower), vocabulary_size)


def _cut(vocabulary, size):
    """The first `size` tokens of a learner's vocabulary, keeping those coverage needs.

    The learner lists the special tokens, the characters, then the pieces
    from the most frequent down; single characters and their `##`
    continuations are kept wherever they are listed.
    """
    required = set(SPECIAL_TOKENS) | {
        token for token in vocabulary if len(token) == 1 or (token.startswith("##") and len(token) == 3)
    }
    room = size - len(required)
    kept = []
    for token in vocabulary:
        if token in required:
            kept.append(token)
        elif room > 0:
            kept.append(token)
            room -= 1
    return kept
