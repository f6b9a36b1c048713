"""What TensorFlow prepares for the cross-backend tests, and the runs of their jobs on the other backends.

The jobs of `run_on_backend.py` that can share a process run in one per
backend (each start-up costs seconds): on JAX, with two CPU devices for
the data-parallel job, which goes last; on PyTorch. `tests/backend/conftest.py`
makes `run_backends` a session fixture, which the tests of both modules read.
"""

import os
import subprocess
import sys

import keras
import numpy as np

import kbert
from tests.backend.run_on_backend import tiny_classifier, token_ids
from tests.test_case import tiny_encoder_kwargs

OTHER_BACKENDS = ("jax", "torch")
RUNNER = os.path.join(os.path.dirname(__file__), "run_on_backend.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_JOBS = {
    "jax": ("outputs", "train_steps", "fine_tune", "data_parallel"),
    "torch": ("outputs", "train_steps", "fine_tune"),
}
# JAX's CPU platform as two devices, for `data_parallel` (the other jobs use the first),
# beside the XLA flags of the run (`make test` sets some).
JAX_DEVICES = {"XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS"),
                                                   "--xla_force_host_platform_device_count=2"]))}


def run(jobs, folder, backend, **environment):
    """Runs `jobs` of run_on_backend.py on `backend` in one fresh process; it must succeed."""
    env = {**os.environ, "KERAS_BACKEND": backend, **environment}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, RUNNER, ",".join(jobs), str(folder)], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"{jobs} on {backend} failed:\n{result.stderr[-4000:]}"


def random_weights(model, seed=0):
    """Every weight random (biases and LayerNorm too), so that none can be skipped unnoticed."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.get_weights()])


def save_encoders(folder):
    """BERT, ALBERT and a head-pruned BERT, random weights, saved; inputs with padding.

    Returns TensorFlow's outputs, `{"<file>/<output>/<i>": array}`.
    """
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
    return expected


def save_classifier_and_train(folder):
    """A classifier with random weights and a batch, saved; TensorFlow's losses of two steps and weights after."""
    keras.utils.set_random_seed(0)
    model = tiny_classifier()
    random_weights(model, seed=1)
    model.save(folder / "classifier.keras")
    inputs, labels = token_ids(rows=6)
    np.savez(folder / "batch.npz", labels=labels, **inputs)
    losses = [float(model.train_on_batch(inputs, labels)[0]) for _ in range(2)]
    return losses, model.get_weights()


def run_backends(tmp_path_factory):
    """`(folder, expected)`: the jobs' results in `folder`, TensorFlow's own in `expected`
    (`outputs`, `losses`, `weights`)."""
    folder = tmp_path_factory.mktemp("backends")
    expected = {"outputs": save_encoders(folder)}
    expected["losses"], expected["weights"] = save_classifier_and_train(folder)
    for backend in OTHER_BACKENDS:
        run(SHARED_JOBS[backend], folder, backend, **(JAX_DEVICES if backend == "jax" else {}))
    return folder, expected
