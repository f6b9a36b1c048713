"""A function run in a TensorFlow process: its answer, its errors in one line, and how it ended."""

import os

import pytest

from kbert.backend.tensorflow_process import call_in_tensorflow

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def kbert_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", REPOSITORY + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_the_answer_comes_back_from_a_process_on_tensorflow(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert call_in_tensorflow("os:getenv", "KERAS_BACKEND", "reading the backend") == "tensorflow"


def test_the_users_errors_come_back_as_they_are(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        call_in_tensorflow("os:stat", str(tmp_path / "absent"), "reading a file")
    assert str(tmp_path / "absent") in str(caught.value) and "\n" not in str(caught.value)


def test_other_errors_and_deaths_name_the_process():
    with pytest.raises(ChildProcessError, match=r"^The TensorFlow process parsing JSON failed: JSONDecodeError: "):
        call_in_tensorflow("json:loads", "{", "parsing JSON")
    with pytest.raises(ChildProcessError, match=r"^The TensorFlow process exiting ended with exit status 3$"):
        call_in_tensorflow("os:_exit", 3, "exiting")
