"""Models move between backends: trained on JAX or PyTorch, loaded, exported and served on TensorFlow.

Each backend runs in a process of its own (`run_on_backend.py`); this module
runs on TensorFlow, where the models arrive.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import kbert
from tests.backend.run_on_backend import TEXTS
from tests.backend.backend_runs import OTHER_BACKENDS

pytestmark = pytest.mark.tensorflow_backend  # where the models arrive


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_a_model_trained_on_another_backend_loads_here_and_its_export_serves(backend_runs, backend):
    """Fine-tuned on raw text on JAX or PyTorch: the `.keras` file predicts the same here, and the
    export made there (through a TensorFlow process) serves the same answers in a fresh process."""
    tmp_path, _ = backend_runs
    expected = np.load(tmp_path / f"predictions-{backend}.npz")["probabilities"]
    model = kbert.load_model(str(tmp_path / f"model-{backend}.keras"))
    np.testing.assert_allclose(model.predict_proba(TEXTS, verbose=0), expected, atol=1e-5)
    assert model.class_names == ["bad", "good"]
    # The export, served by `kbert predict` (a process of its own, on the SavedModel alone).
    result = subprocess.run(
        [sys.executable, "-m", "kbert.cli", "predict", str(tmp_path / f"export-{backend}"), *TEXTS],
        capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": "tensorflow"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served = [json.loads(line) for line in result.stdout.splitlines()]
    np.testing.assert_allclose([row["probabilities"] for row in served], expected, atol=1e-5)
    assert [row["labels"] for row in served] == [["bad", "good"][i] for i in expected.argmax(-1)]



def test_the_cli_trains_lora_adapters_on_jax_and_exports_what_it_trained(tmp_path, capsys):
    """`kbert train --backend jax --lora-rank 2`, then `kbert export` here, on TensorFlow (adapters merged).

    (An export asked for on JAX runs in a TensorFlow process: `backend_runs.py`'s `fine_tune` job.)
    """
    from kbert import cli

    out = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, "-m", "kbert.cli", "train", "sms_spam", "--backend", "jax", "--out", str(out),
         "--encoder", "tiny", "--epochs", "1", "--max-examples", "16", "--max-eval-examples", "16",
         "--sequence-length", "16", "--lora-rank", "2", "--quiet"],
        capture_output=True, text=True,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["examples"] == 16 and metrics["settings"]["lora_rank"] == 2
    assert cli.main(["export", str(out / "model.keras"), "--name", "spam", "--out", str(tmp_path / "served")]) == 0
    assert "served/spam/1" in capsys.readouterr().out
    served = tf.saved_model.load(str(tmp_path / "served" / "spam" / "1")).signatures["serving_default"]
    model = kbert.load_model(str(out / "model.keras"))
    assert model.encoder.lora is not None
    texts = ["free prize now", "see you soon"]
    np.testing.assert_allclose(served(text=tf.constant(texts))["probabilities"],
                               model.predict_proba(texts, verbose=0), atol=1e-5)
