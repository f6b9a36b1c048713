"""Every backend computes what TensorFlow computes: the same weights give the same outputs and updates.

Each backend runs in a process of its own (`run_on_backend.py`); this module
runs on TensorFlow, the reference, and compares. Also: kbert without
TensorFlow, and JAX's data parallelism.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from tests.backend.run_on_backend import tiny_classifier, token_ids
from tests.test_case import tiny_encoder_kwargs

pytestmark = pytest.mark.tensorflow_backend  # the reference side of every comparison

OTHER_BACKENDS = ("jax", "torch")
RUNNER = os.path.join(os.path.dirname(__file__), "run_on_backend.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(job, folder, backend, **environment):
    """Runs `job` of run_on_backend.py on `backend` in a fresh process; it must succeed."""
    env = {**os.environ, "KERAS_BACKEND": backend, **environment}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, RUNNER, job, str(folder)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{job} on {backend} failed:\n{result.stderr[-4000:]}"


def random_weights(model, seed=0):
    """Every weight random (biases and LayerNorm too), so that none can be skipped unnoticed."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.get_weights()])


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """BERT, ALBERT and a head-pruned BERT, random weights, saved; inputs with padding."""
    folder = tmp_path_factory.mktemp("encoders")
    kwargs = tiny_encoder_kwargs()
    models = {
        "encoder-bert": kbert.Encoder(**kwargs),
        "encoder-albert": kbert.Encoder(**tiny_encoder_kwargs(architecture="albert")),
        "encoder-pruned": kbert.Encoder(**{**kwargs, "heads_per_layer": [1, 2]}),
    }
    inputs, _ = token_ids(rows=4, length=9)
    inputs["token_ids"] = inputs["token_ids"] % kwargs["vocabulary_size"]
    np.savez(folder / "inputs.npz", **inputs)
    expected = {}
    for name, encoder in models.items():
        random_weights(encoder)
        encoder.save(folder / f"{name}.keras")
        for output, value in encoder(inputs).items():
            for i, tensor in enumerate(value if isinstance(value, list) else [value]):
                expected[f"{name}.keras/{output}/{i}"] = np.asarray(tensor)
    for backend in OTHER_BACKENDS:
        run("outputs", folder, backend)
    return folder, expected


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
@pytest.mark.parametrize("architecture", ["bert", "albert", "pruned"])
def test_encoder_outputs_equal_tensorflows(encoders, backend, architecture):
    folder, expected = encoders
    got = np.load(folder / f"outputs-{backend}.npz")
    names = [name for name in expected if name.startswith(f"encoder-{architecture}.keras/")]
    assert names and sorted(names) == sorted(n for n in got.files if n.startswith(f"encoder-{architecture}."))
    for name in names:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5, err_msg=name)


def test_two_training_steps_give_the_same_losses_and_weights(tmp_path):
    """The loss of a step, and the update (BertAdamW: each backend's own kernel) that the next step's loss sees."""
    keras.utils.set_random_seed(0)
    model = tiny_classifier()
    random_weights(model, seed=1)
    model.save(tmp_path / "classifier.keras")
    inputs, labels = token_ids(rows=6)
    np.savez(tmp_path / "batch.npz", labels=labels, **inputs)
    expected = [float(model.train_on_batch(inputs, labels)[0]) for _ in range(2)]
    weights = model.get_weights()
    assert expected[1] != expected[0]  # the first step moved the weights
    for backend in OTHER_BACKENDS:
        run("train_steps", tmp_path, backend)
        got = np.load(tmp_path / f"steps-{backend}.npz")
        np.testing.assert_allclose(got["losses"], expected, rtol=1e-5, err_msg=backend)
        for i, weight in enumerate(weights):
            np.testing.assert_allclose(got[f"weight_{i}"], weight, atol=1e-5, err_msg=f"{backend} weight {i}")


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_without_tensorflow_models_train_save_and_load_and_text_asks_for_it(tmp_path, backend):
    run("without_tensorflow", tmp_path, backend)
    report = json.loads((tmp_path / f"without-tensorflow-{backend}.json").read_text())
    assert report["tensorflow_loaded"] is False
    assert report["class"] == "Classifier" and report["same_predictions"] is True
    assert len(report["losses"]) == 2 and all(np.isfinite(report["losses"]))
    for name in ("raw_text_fit", "tokenizer", "export"):
        assert report[name].startswith("TensorFlowMissingError: "), (name, report[name])
        assert "needs TensorFlow and TensorFlow Text, which are not installed" in report[name]
        assert "pip install tensorflow tensorflow-text" in report[name]


def test_jax_data_parallel_trains_as_one_device_does_with_replicated_weights(tmp_path):
    run("data_parallel", tmp_path, "jax", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    report = json.loads((tmp_path / "data-parallel.json").read_text())
    assert report["devices"] == 2
    assert report["one_device"]["weight_devices"] == 1
    assert report["data_parallel"]["weight_devices"] == 2  # a copy of every weight on each device
    np.testing.assert_allclose(report["data_parallel"]["losses"], report["one_device"]["losses"], rtol=1e-5)
    assert report["same_predictions"]
