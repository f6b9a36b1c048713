"""The backend chosen before Keras loads, and a command's --backend."""

import json
import os
import subprocess
import sys

import pytest

from kbert.backend.selection import configured_backend, use_backend

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_environment_wins_over_keras_json(tmp_path, monkeypatch):
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch"}))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert configured_backend() == "torch"
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert configured_backend() == "jax"
    (tmp_path / "keras.json").write_text("not json")
    monkeypatch.delenv("KERAS_BACKEND")
    assert configured_backend() is None


def test_another_backend_once_keras_is_loaded_is_refused(monkeypatch):
    import keras  # noqa: F401 (loaded, as in this test process)

    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    use_backend("tensorflow", asked_by="--backend")  # the same one: nothing to do
    with pytest.raises(ValueError, match=r"^--backend jax: Keras was loaded already, on tensorflow\.$"):
        use_backend("jax", asked_by="--backend")


@pytest.mark.parametrize("environment, expected", [
    ({}, {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "1"}),
    ({"TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLE_ONEDNN_OPTS": "0", "KERAS_BACKEND": "jax"},
     {"KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "0", "TF_ENABLE_ONEDNN_OPTS": "0"}),
])
def test_import_kbert_sets_what_keras_and_tensorflow_read_when_they_load(tmp_path, environment, expected):
    # A fresh process: Keras and TensorFlow read these once, so kbert sets them before either loads.
    script = ("import json, os, sys\nimport kbert.backend.selection\n"
              "print(json.dumps({name: os.environ.get(name) for name in "
              "('KERAS_BACKEND', 'TF_CPP_MIN_LOG_LEVEL', 'TF_ENABLE_ONEDNN_OPTS')}))")
    clean = {name: value for name, value in os.environ.items()
             if name not in ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**clean, **environment, "KERAS_HOME": str(tmp_path),
                                 "PYTHONPATH": REPOSITORY})
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected
