"""Every backend computes what TensorFlow computes: the same weights give the same outputs and updates.

Each backend runs in a process of its own (`run_on_backend.py`); this module
runs on TensorFlow, the reference, and compares. Also: kbert without
TensorFlow, and JAX's data parallelism.
"""

import json

import numpy as np
import pytest

from tests.backend.backend_runs import OTHER_BACKENDS, run

pytestmark = pytest.mark.tensorflow_backend  # the reference side of every comparison


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
@pytest.mark.parametrize("architecture", ["bert", "albert", "pruned"])
def test_encoder_outputs_equal_tensorflows(backend_runs, backend, architecture):
    folder, expected = backend_runs
    got = np.load(folder / f"outputs-{backend}.npz")
    names = [name for name in expected["outputs"] if name.startswith(f"encoder-{architecture}.keras/")]
    assert names and sorted(names) == sorted(n for n in got.files if n.startswith(f"encoder-{architecture}."))
    for name in names:
        np.testing.assert_allclose(got[name], expected["outputs"][name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_two_training_steps_give_the_same_losses_and_weights(backend_runs, backend):
    """The loss of a step, and the update (BertAdamW: each backend's own kernel) that the next step's loss sees."""
    folder, expected = backend_runs
    assert expected["losses"][1] != expected["losses"][0]  # the first step moved the weights
    got = np.load(folder / f"steps-{backend}.npz")
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=1e-5, err_msg=backend)
    for i, weight in enumerate(expected["weights"]):
        np.testing.assert_allclose(got[f"weight_{i}"], weight, atol=1e-5, err_msg=f"{backend} weight {i}")


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_without_tensorflow_models_train_save_and_load_and_text_asks_for_it(tmp_path, backend):
    run(["without_tensorflow"], tmp_path, backend)
    report = json.loads((tmp_path / f"without-tensorflow-{backend}.json").read_text())
    assert report["tensorflow_loaded"] is False
    assert report["class"] == "Classifier" and report["same_predictions"] is True
    assert len(report["losses"]) == 2 and all(np.isfinite(report["losses"]))
    for name in ("raw_text_fit", "tokenizer", "export"):
        assert report[name].startswith("TensorFlowMissingError: "), (name, report[name])
        assert "needs TensorFlow and TensorFlow Text, which are not installed" in report[name]
        assert "pip install tensorflow tensorflow-text" in report[name]


def test_jax_data_parallel_trains_as_one_device_does_with_replicated_weights(backend_runs):
    folder, _ = backend_runs
    report = json.loads((folder / "data-parallel.json").read_text())
    assert report["devices"] == 2
    assert report["one_device"]["weight_devices"] == 1
    assert report["data_parallel"]["weight_devices"] == 2  # a copy of every weight on each device
    np.testing.assert_allclose(report["data_parallel"]["losses"], report["one_device"]["losses"], rtol=1e-5)
    assert report["same_predictions"]
