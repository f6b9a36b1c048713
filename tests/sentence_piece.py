"""Tiny ALBERT-style SentencePiece models trained on the offline data sets, and ALBERT's reference preparation."""

import functools
import io
import unicodedata

from tests.preprocessing.conftest import data_file, squad_contexts

WORD_START = "\u2581"


def albert_prepare(text, lowercase=True, strip_accents=True):
    """The reference ALBERT tokenizer's text preparation (Hugging Face's `AlbertTokenizer`), in plain Python."""
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if strip_accents:
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    if lowercase:
        text = text.lower()
    return text


def albert_reference_ids(processor, text, lowercase=True, strip_accents=True):
    """Token ids of the reference ALBERT tokenizer: prepared text, SentencePiece, digit-comma pieces split."""
    pieces = []
    for piece in processor.encode(albert_prepare(text, lowercase, strip_accents), out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            parts = processor.encode(piece[:-1].replace(WORD_START, ""), out_type=str)
            if not piece.startswith(WORD_START) and parts and parts[0].startswith(WORD_START):
                parts = parts[1:] if parts[0] == WORD_START else [parts[0][1:]] + parts[1:]
            pieces += parts + [","]
        else:
            pieces.append(piece)
    return [processor.piece_to_id(piece) for piece in pieces]


def training_lines():
    """About 4,000 prepared lines: WikiText-2 validation, SQuAD contexts and SST-2 dev."""
    with open(data_file("wikitext-2-raw", "wiki.valid.raw"), encoding="utf-8") as f:
        wiki = [line for line in f.read().splitlines() if line.strip()][:2500]
    with open(data_file("glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        sst2 = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    return [albert_prepare(line) for line in wiki + squad_contexts(700) + sst2]


@functools.cache
def albert_sentence_piece_model(vocabulary_size=800):
    """The bytes of a unigram SentencePiece model with ALBERT's special pieces at ids 0 to 4.

    `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3 (control pieces) and `[MASK]` 4
    (user-defined), as in ALBERT's `spiece.model`.
    """
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()),
        model_writer=model,
        vocab_size=vocabulary_size,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        pad_piece="<pad>",
        unk_piece="<unk>",
        control_symbols=["[CLS]", "[SEP]"],
        user_defined_symbols=["[MASK]"],
        character_coverage=0.9995,
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()
