"""Writes over a user's file leave the old file or the new one, never a broken one."""

import json
import os

import keras
import pytest

import kbert
from kbert.atomic_files import TEMPORARY_PREFIX, SavesAtomically, contains_path, json_text
from tests.test_case import TINY_VOCABULARY, file_size_limit, folder_state, tiny_encoder_kwargs


def tiny_models():
    kwargs = tiny_encoder_kwargs()
    encoder = kbert.Encoder(**kwargs)
    classifier = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8,
                                  **{k: v for k, v in kwargs.items() if k not in ("vocabulary_size",
                                                                                   "max_sequence_length")})
    return {"classifier": classifier, "pretrainer": kbert.Pretrainer(encoder)}


@pytest.mark.parametrize("kind", ["classifier", "pretrainer"])
def test_a_save_that_fails_midway_leaves_the_saved_model_whole(tmp_path, kind):
    model = tiny_models()[kind]
    path = tmp_path / "model.keras"
    model.save(str(path))
    before = folder_state(tmp_path)
    # Keras alone writes into the old file and leaves a partial zip.
    with file_size_limit(path.stat().st_size // 2), pytest.raises(OSError):
        model.save(str(path))
    assert folder_state(tmp_path) == before  # the old file whole, no temporary file left
    assert not any(name.startswith(TEMPORARY_PREFIX) for name in os.listdir(tmp_path))
    assert type(kbert.load_model(str(path))) is type(model)


def test_weights_that_fail_midway_leave_the_saved_weights_whole(tmp_path, monkeypatch):
    # (A real full disk: HDF5 crashes the process when it closes the file.)
    model = tiny_models()["classifier"]
    path = tmp_path / "model.weights.h5"
    model.save_weights(str(path))
    before = folder_state(tmp_path)

    def disk_full(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as file:
            file.write(b"half of the weights")
        raise OSError(28, "No space left on device", filepath)

    monkeypatch.setattr(keras.Model, "save_weights", disk_full)
    with pytest.raises(OSError, match="No space left"):
        model.save_weights(str(path))
    assert folder_state(tmp_path) == before
    monkeypatch.undo()
    model.load_weights(str(path))


def test_every_kbert_model_saves_atomically():
    classes = [kbert.Encoder, kbert.Pretrainer, kbert.Distiller, kbert.LayerwiseDistiller, kbert.Classifier,
               kbert.Embedder, kbert.Tagger, kbert.QuestionAnswerer, kbert.MultipleChoice]
    assert [cls.__name__ for cls in classes if not issubclass(cls, SavesAtomically)] == []


def test_json_text_is_strict_json():
    text = json_text({"loss": float("nan"), "scores": [1.5, float("inf")], "name": "run"})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"loss": None, "scores": [1.5, None], "name": "run"}


def test_contains_path_follows_links(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("text")
    os.symlink(tmp_path / "corpus", tmp_path / "link")
    assert contains_path(tmp_path / "corpus", tmp_path / "corpus")
    assert contains_path(tmp_path / "corpus", tmp_path / "link" / "a.txt")
    assert not contains_path(tmp_path / "corpus", tmp_path / "corpus-2")
    assert not contains_path(tmp_path / "corpus" / "a.txt", tmp_path / "corpus")
