"""kbert.export: numbered versions, written atomically, never over an existing one unless told."""

import os

import pytest
import tensorflow as tf

import kbert
from kbert.serving import exporter
from tests.serving.conftest import tiny
from tests.test_case import TINY_VOCABULARY


@pytest.fixture(scope="module")
def classifier():
    model = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8, **tiny())
    model.text_pairs = False
    return model


def test_versions_count_up_from_one(classifier, tmp_path):
    folder = tmp_path / "spam"
    assert kbert.export(classifier, str(folder)) == str(folder / "1")
    assert kbert.export(classifier, str(folder)) == str(folder / "2")
    assert kbert.export(classifier, str(folder), version=7) == str(folder / "7")
    assert kbert.serving.versions(str(folder)) == [1, 2, 7]
    assert kbert.serving.latest_version(str(folder)) == str(folder / "7")
    # Nothing but the versions: no staging folder is left behind.
    assert sorted(os.listdir(folder)) == ["1", "2", "7"]


def test_an_existing_version_is_kept_unless_overwrite(classifier, tmp_path):
    folder = tmp_path / "spam"
    kbert.export(classifier, str(folder), version=1)
    marker = folder / "1" / "assets" / "vocab.txt"
    before = marker.stat().st_mtime_ns
    with pytest.raises(FileExistsError, match="overwrite=True"):
        kbert.export(classifier, str(folder), version=1)
    assert marker.stat().st_mtime_ns == before
    kbert.export(classifier, str(folder), version=1, overwrite=True)
    assert sorted(os.listdir(folder)) == ["1"]
    assert "serving_default" in tf.saved_model.load(str(folder / "1")).signatures


def test_a_failed_export_leaves_no_version_and_no_partial_files(classifier, tmp_path, monkeypatch):
    folder = tmp_path / "spam"
    kbert.export(classifier, str(folder), version=1)

    def fail_midway(module, path, signatures=None):
        with open(os.path.join(path, "saved_model.pb"), "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(exporter.tf.saved_model, "save", fail_midway)
    with pytest.raises(OSError, match="disk full"):
        kbert.export(classifier, str(folder))
    with pytest.raises(OSError, match="disk full"):
        kbert.export(classifier, str(folder), version=1, overwrite=True)
    assert sorted(os.listdir(folder)) == ["1"]  # version 1 untouched, no version 2, no staging folder
    assert os.path.getsize(folder / "1" / "saved_model.pb") > 1000


def test_bad_requests_to_export_are_explained(classifier, tmp_path):
    with pytest.raises(ValueError, match="positive integer"):
        kbert.export(classifier, str(tmp_path / "m"), version=0)
    with pytest.raises(TypeError, match="takes a task model"):
        kbert.export(classifier.encoder, str(tmp_path / "m"))
    fresh = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8, **tiny())
    with pytest.raises(ValueError, match="pass text_pairs=False or text_pairs=True"):
        kbert.export(fresh, str(tmp_path / "m"))
    assert not (tmp_path / "m").exists() or os.listdir(tmp_path / "m") == []
    with pytest.raises(FileNotFoundError, match="No SavedModel"):
        kbert.serving.latest_version(str(tmp_path))


def test_the_text_pairs_a_classifier_reads_are_recorded_and_saved(tmp_path):
    model = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8, **tiny())
    assert model.text_pairs is None
    model.predict((["the cat"], ["sat"]), verbose=0)
    assert model.text_pairs is True
    model.save(str(tmp_path / "pairs.keras"))
    assert kbert.load_model(str(tmp_path / "pairs.keras")).text_pairs is True
    signature = tf.saved_model.load(kbert.export(model, str(tmp_path / "nli"))).signatures["serving_default"]
    assert sorted(signature.structured_input_signature[1]) == ["text", "text_pair"]
