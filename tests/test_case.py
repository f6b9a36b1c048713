"""Shared test harnesses: the checks every layer, preprocessor and task passes."""

import os

import keras
import numpy as np
import tensorflow as tf

TINY_VOCABULARY = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "cat", "dog", "sat", "on", "mat", "good", "bad", "film",
    "free", "prize", "now", "see", "you", "soon", "##s", "##ing", ".", ",", "!", "?",
]  # fmt: skip


def tiny_encoder_kwargs(vocabulary_size=len(TINY_VOCABULARY)):
    return {
        "vocabulary_size": vocabulary_size,
        "num_layers": 2,
        "hidden_dim": 16,
        "num_heads": 2,
        "intermediate_dim": 32,
        "max_sequence_length": 32,
    }


def to_numpy(value):
    return keras.tree.map_structure(
        lambda v: v.to_list() if isinstance(v, tf.RaggedTensor) else np.asarray(v), value
    )


def assert_all_close(a, b, atol=1e-6):
    keras.tree.assert_same_structure(a, b)
    for x, y in zip(keras.tree.flatten(to_numpy(a)), keras.tree.flatten(to_numpy(b))):
        if isinstance(x, list):
            assert x == y
        else:
            np.testing.assert_allclose(x, y, atol=atol)


def run_config_round_trip(layer, inputs):
    """`from_config(get_config())` builds an equal layer: same config, same output."""
    config = layer.get_config()
    restored = layer.__class__.from_config(config)
    assert restored.get_config() == config
    if restored.weights:
        restored.set_weights(layer.get_weights())
    assert_all_close(layer(inputs), restored(inputs))
    return restored


def run_preprocessing_equivalence(layer, inputs):
    """A preprocessing layer gives the same output eagerly, in `tf.data` and in a `tf.function`."""
    direct = layer(inputs)
    dataset = tf.data.Dataset.from_tensors(inputs).map(layer)
    in_data = next(iter(dataset))
    assert_all_close(direct, in_data)
    traced = tf.function(layer)(inputs)
    assert_all_close(direct, traced)
    return direct


def run_task_test(model, x, y, tmp_path, batch_size=2):
    """A task fits on raw text, predicts, and survives `.keras` save and load."""
    history = model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    predictions = model.predict(x, batch_size=batch_size, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is type(model)
    np.testing.assert_allclose(
        restored.predict(x, batch_size=batch_size, verbose=0), predictions, atol=1e-5
    )
    return restored, predictions
