import numpy as np

import kbert
from kbert.fine_tuning import build_task_model
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


def test_a_built_encoder_gets_the_attention_dropout_asked_for_and_keeps_its_weights():
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.1)
    model = build_task_model("sst2", encoder, vocabulary=TINY_VOCABULARY, sequence_length=16,
                             attention_dropout=0.0)
    assert (model.encoder.dropout, model.encoder.attention_dropout) == (0.1, 0.0)
    assert encoder.attention_dropout == 0.1  # the given encoder is left as it was
    for copied, original in zip(model.encoder.get_weights(), encoder.get_weights(), strict=True):
        np.testing.assert_array_equal(copied, original)
    preset = build_task_model("sst2", "tiny", vocabulary=TINY_VOCABULARY, sequence_length=16,
                              attention_dropout=0.0)
    assert (preset.encoder.dropout, preset.encoder.attention_dropout) == (0.1, 0.0)
