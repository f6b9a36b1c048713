"""`UntrackedStepState`: Keras' JAX trainer's per-step state is not walked by the layer tracker, and callbacks still sync it."""

import keras
import numpy as np
import pytest

import kbert
from tests.test_case import BACKEND, numpy, tiny_encoder_kwargs

pytestmark = [
    pytest.mark.all_backends,
    pytest.mark.skipif(BACKEND != "jax", reason="only Keras' JAX trainer keeps a per-step state"),
]


class _ReadsWeightsMidEpoch(keras.callbacks.Callback):
    """Reads a weight after the first step, as a callback that syncs the state does; notes the state's type."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.state_type = type(self.model._jax_state)
            self.weight_after_first_step = numpy(self.model.trainable_variables[0])


def _trained(callbacks):
    rng = np.random.default_rng(0)
    token_ids = {"token_ids": rng.integers(5, 27, (16, 8)).astype("int32"),
                 "segment_ids": np.zeros((16, 8), "int32"), "padding_mask": np.ones((16, 8), "int32")}
    keras.utils.set_random_seed(0)
    model = kbert.Classifier(kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0), num_classes=2, dropout=0.0)
    model.compile(learning_rate=1e-2)
    initial = numpy(model.trainable_variables[0])
    model.fit(token_ids, rng.integers(0, 2, 16), batch_size=8, epochs=1, shuffle=False, verbose=0,
              callbacks=callbacks)
    return initial, [numpy(variable) for variable in model.trainable_variables]


def test_the_step_state_is_a_plain_dict_and_a_callback_reading_weights_sees_and_keeps_training():
    reader = _ReadsWeightsMidEpoch()
    initial, synced = _trained([reader])
    # Keras' tracker would have wrapped the dict (and walked its ~650 arrays on BERT-base).
    assert reader.state_type is dict
    assert not np.allclose(reader.weight_after_first_step, initial)  # the first step's update, read mid-epoch
    _, unsynced = _trained([])
    for a, b in zip(synced, unsynced):  # training went on from the synced state
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
