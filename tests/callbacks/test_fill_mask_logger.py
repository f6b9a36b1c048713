import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.callbacks import FillMaskLogger
from tests.callbacks.event_files import texts
from tests.pretraining.test_pretrainer import pretraining_batch, tiny_pretrainer
from tests.test_case import TINY_VOCABULARY

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

SENTENCES = ["the cat [MASK] on the mat .", "a [MASK] film , a [MASK] prize !"]


def test_logs_the_guesses_every_n_steps_and_at_the_end(tmp_path):
    keras.utils.set_random_seed(0)
    model = tiny_pretrainer()
    model.compile(learning_rate=3e-3, jit_compile=False)
    logger = FillMaskLogger(tmp_path, SENTENCES, TINY_VOCABULARY, every=2, top_k=3)
    dataset = tf.data.Dataset.from_tensors(pretraining_batch()).repeat(5)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[logger])

    tables = texts(tmp_path / "train")["fill_mask"]
    assert sorted(tables) == [2, 4, 5]
    table = tables[5]
    # The final model's own guesses, mask by mask.
    guesses = kbert.fill_mask(model, vocabulary=TINY_VOCABULARY, top_k=3)(SENTENCES)
    assert logger.guesses == guesses
    assert table.shape == (1 + 3, 3)
    assert table[0].tolist() == ["sentence", "mask", "top 3 guesses (probability)"]
    assert table[1:, :2].tolist() == [[SENTENCES[0], "1"], [SENTENCES[1], "1"], [SENTENCES[1], "2"]]
    rows = [candidates for masks in guesses for candidates in masks]
    for row, candidates in zip(table[1:], rows):
        shown = row[2].split(", ")
        assert [part.split(" (")[0] for part in shown] == [c["token"] for c in candidates]
        np.testing.assert_allclose([float(part.split("(")[1][:-1]) for part in shown],
                                   [c["score"] for c in candidates], atol=5e-4)


def test_needs_a_pretrainer_and_masked_sentences(tmp_path):
    logger = FillMaskLogger(tmp_path, "the [MASK]", TINY_VOCABULARY)
    logger.set_model(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    with pytest.raises(TypeError, match="needs a kbert.Pretrainer"):
        logger.write(step=0)
    logger.set_model(tiny_pretrainer())
    logger.sentences = ["no mask here"]
    with pytest.raises(ValueError, match="No \\[MASK\\] token"):
        logger.write(step=0)
    with pytest.raises(ValueError, match="`every`"):
        FillMaskLogger(tmp_path, ["the [MASK]"], TINY_VOCABULARY, every=0)
    with pytest.raises(ValueError, match="`sentences`"):
        FillMaskLogger(tmp_path, [], TINY_VOCABULARY)
