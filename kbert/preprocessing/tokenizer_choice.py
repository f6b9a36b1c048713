"""The tokenizer a `vocabulary` argument stands for: BERT's WordPiece or ALBERT's SentencePiece."""

import os

from kbert.preprocessing.base_tokenizer import BaseTokenizer
from kbert.preprocessing.sentence_piece_tokenizer import SentencePieceTokenizer
from kbert.preprocessing.tokenizer import Tokenizer


def tokenizer_from_vocabulary(vocabulary, lowercase=True):
    """The tokenizer a `vocabulary` argument stands for.

    A ready tokenizer is returned as is; a SentencePiece model (its bytes, or
    a path ending in `.model` or `.spm`, such as ALBERT's `spiece.model`)
    gives a `kbert.SentencePieceTokenizer`; a list of tokens or a `vocab.txt`
    path gives a WordPiece `kbert.Tokenizer`.

    Args:
        vocabulary: a `kbert.Tokenizer` or `kbert.SentencePieceTokenizer`, a
            SentencePiece model (bytes, or a `.model` or `.spm` path), or a
            WordPiece vocabulary (a list of tokens or a `vocab.txt` path).
        lowercase: whether a tokenizer made here lowercases its texts.

    Example:
    >>> tokenizer = tokenizer_from_vocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat"])
    >>> type(tokenizer).__name__, tokenizer_from_vocabulary(tokenizer) is tokenizer
    ('Tokenizer', True)
    """
    if isinstance(vocabulary, BaseTokenizer):
        return vocabulary
    if isinstance(vocabulary, (bytes, bytearray)) or (
        isinstance(vocabulary, (str, os.PathLike))
        and os.fspath(vocabulary).endswith((".model", ".spm"))
    ):
        return SentencePieceTokenizer(vocabulary, lowercase=lowercase)
    return Tokenizer(vocabulary, lowercase=lowercase)
