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
    """
    if isinstance(vocabulary, BaseTokenizer):
        return vocabulary
    if isinstance(vocabulary, (bytes, bytearray)) or (
        isinstance(vocabulary, (str, os.PathLike))
        and os.fspath(vocabulary).endswith((".model", ".spm"))
    ):
        return SentencePieceTokenizer(vocabulary, lowercase=lowercase)
    return Tokenizer(vocabulary, lowercase=lowercase)
