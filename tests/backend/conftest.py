"""The session fixture of the cross-backend tests (see `backend_runs.py`)."""

import pytest

from tests.backend.backend_runs import run_backends


@pytest.fixture(scope="session")
def backend_runs(tmp_path_factory):
    """`(folder, expected)`: what the jobs wrote on JAX and PyTorch, and TensorFlow's own results."""
    return run_backends(tmp_path_factory)
