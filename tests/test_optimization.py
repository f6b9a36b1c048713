import numpy as np
import pytest

from kbert.optimization import BertAdamW, WarmupLinearDecay, bert_adamw


def rates(schedule, steps):
    return np.array([float(schedule(step)) for step in steps])


def test_warms_up_then_decays_linearly_to_zero():
    schedule = WarmupLinearDecay(1.0, total_steps=100, warmup_fraction=0.1)
    r = rates(schedule, [0, 4, 9, 10, 55, 99, 100, 150])
    np.testing.assert_allclose(r[:3], [0.1, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(r[3], 1.0, atol=1e-6)
    np.testing.assert_allclose(r[4], 0.5, atol=1e-6)
    assert 0 < r[5] < 0.02 and r[6] == 0 and r[7] == 0


def test_new_window_restarts_the_cycle_without_a_new_schedule():
    schedule = WarmupLinearDecay(2.0, total_steps=10)
    schedule.set_window(start_step=50, total_steps=20)
    np.testing.assert_allclose(rates(schedule, [50, 51, 60]), [1.0, 2.0, 2.0 * 10 / 18], atol=1e-6)


def test_without_total_steps_the_rate_stays_at_peak():
    schedule = WarmupLinearDecay(3e-4)
    np.testing.assert_allclose(rates(schedule, [0, 1000]), [3e-4, 3e-4], rtol=1e-6)


def test_config_round_trip_keeps_the_window():
    schedule = WarmupLinearDecay(1e-3, total_steps=40, warmup_fraction=0.2, start_step=7)
    restored = WarmupLinearDecay(**schedule.get_config())
    assert restored.get_config() == schedule.get_config()
    np.testing.assert_allclose(rates(restored, range(0, 60, 5)), rates(schedule, range(0, 60, 5)))


@pytest.mark.parametrize("name, excluded", [("dense/kernel", False), ("dense/bias", True), ("layer_norm/gamma", True)])
def test_adamw_skips_weight_decay_on_biases_and_layer_norm(name, excluded):
    import keras

    optimizer = BertAdamW.from_config(bert_adamw(1e-4).get_config())
    variable = keras.Variable(np.ones(3), name=name.split("/")[1])
    variable._path = name  # what Keras matches the exclusions against
    assert optimizer._use_weight_decay(variable) is not excluded
