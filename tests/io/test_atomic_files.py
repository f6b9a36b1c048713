"""Writes over a user's file leave the old file or the new one, never a broken one."""

import errno
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import h5py
import keras
import pytest

import kbert
from kbert.io.atomic_files import (TEMPORARY_PREFIX, SavesAtomically, contains_path, finish_interrupted_writes, json_text,
                                make_folder_beside, remove_temporary_files, write_atomically, write_together,
                                write_weights_file)
from kbert.io.writer_lock import hold_lock
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


def test_weights_that_fail_midway_leave_the_saved_weights_whole(tmp_path):
    # Built in memory and written by Python: HDF5 writing straight to a full disk crashes the
    # process when it closes the file (h5py/h5py#914); here the write fails as any other.
    model = tiny_models()["classifier"]
    path = tmp_path / "model.weights.h5"
    model.save_weights(str(path))
    before = folder_state(tmp_path)
    with file_size_limit(path.stat().st_size // 2), pytest.raises(OSError) as caught:
        model.save_weights(str(path))
    assert caught.value.errno == errno.EFBIG and caught.value.filename == str(path)
    assert folder_state(tmp_path) == before
    assert open_hdf5_files() == []
    model.load_weights(str(path))


def test_weights_written_in_memory_are_the_bytes_keras_reads(tmp_path):
    model = tiny_models()["classifier"]
    write_weights_file(model, str(tmp_path / "kbert.weights.h5"))
    keras.Model.save_weights(model, str(tmp_path / "keras.weights.h5"))
    with h5py.File(tmp_path / "kbert.weights.h5") as ours, h5py.File(tmp_path / "keras.weights.h5") as theirs:
        assert hdf5_tree(ours) == hdf5_tree(theirs)


def hdf5_tree(group):
    """Every dataset of an HDF5 file by path, as bytes, and every group's attributes."""
    tree = {}
    group.visititems(lambda name, item: tree.__setitem__(
        name, item[()].tobytes() if isinstance(item, h5py.Dataset) else sorted(item.attrs.items())))
    return tree


def open_hdf5_files():
    return [identifier.name for identifier in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)]


def test_a_failed_write_closes_the_hdf5_file_it_left_open(tmp_path):
    path = tmp_path / "data.h5"

    def write(temporary):
        file = h5py.File(temporary, "w")  # never closed: the error comes first
        file.create_dataset("half", data=[1, 2, 3])
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as caught:
        write_atomically(str(path), write)
    assert caught.value.filename == str(path)  # the final path, not the temporary one
    assert open_hdf5_files() == [] and os.listdir(tmp_path) == []


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


def write_pair(tag):
    """A `write_together` write: a model and the metrics that name it."""

    def write(folder):
        with open(os.path.join(folder, "model.keras"), "w") as file:
            file.write(tag)
        with open(os.path.join(folder, "metrics.json"), "w") as file:
            json.dump({"model": tag}, file)

    return write


def consistent(folder):
    """Whether `folder`'s metrics.json, where there is one, names the model.keras beside it."""
    metrics = folder / "metrics.json"
    return not metrics.exists() or json.loads(metrics.read_text())["model"] == (folder / "model.keras").read_text()


def die_at_file_step(monkeypatch, killed_at):
    """The process "dies" (KeyboardInterrupt) at file step `killed_at` (a remove, replace or rmtree) from now on."""
    calls = []

    def dies_at_step(function):
        def step(*args, **kwargs):
            if len(calls) == killed_at:
                raise KeyboardInterrupt
            calls.append(args)
            return function(*args, **kwargs)

        return step

    for module, name in [(os, "remove"), (os, "replace"), (shutil, "rmtree")]:
        monkeypatch.setattr(module, name, dies_at_step(getattr(module, name)))


@pytest.mark.parametrize("killed_at", [0, 1, 2, 3])
def test_files_written_together_never_pair_across_runs_and_a_cut_publication_is_completed(tmp_path, monkeypatch,
                                                                                      killed_at):
    write_together(tmp_path, write_pair("old"), last="metrics.json")
    die_at_file_step(monkeypatch, killed_at)
    with pytest.raises(KeyboardInterrupt):
        write_together(tmp_path, write_pair("new"), last="metrics.json")
    monkeypatch.undo()
    assert consistent(tmp_path)  # an old metrics.json never sits beside the new model
    finished, removed = finish_interrupted_writes(tmp_path, ["model.keras", "metrics.json"])
    assert len(finished) == 1 and removed == []
    assert sorted(os.listdir(tmp_path)) == ["metrics.json", "model.keras"]
    assert consistent(tmp_path) and (tmp_path / "model.keras").read_text() == "new"


@pytest.mark.parametrize("killed_at", [0, 1, 2, 3, 4])
def test_a_file_the_new_group_lacks_goes_with_the_old_group_even_when_the_publication_is_cut(tmp_path, monkeypatch,
                                                                                          killed_at):
    def with_adapter(folder):
        write_pair("old")(folder)
        (pathlib.Path(folder) / "model.adapter").write_text("old")

    write_together(tmp_path, with_adapter, last="metrics.json", optional=["model.adapter"])
    assert (tmp_path / "model.adapter").read_text() == "old"
    die_at_file_step(monkeypatch, killed_at)
    with pytest.raises(KeyboardInterrupt):
        write_together(tmp_path, write_pair("new"), last="metrics.json", optional=["model.adapter"])
    monkeypatch.undo()
    # Where the new metrics are, the old adapter is gone; where the old metrics are, all is of the old group.
    if (tmp_path / "metrics.json").exists():
        metrics = json.loads((tmp_path / "metrics.json").read_text())["model"]
        assert consistent(tmp_path) and (metrics == "new") != (tmp_path / "model.adapter").exists()
    finished, _ = finish_interrupted_writes(tmp_path, ["model.keras", "metrics.json"])
    assert len(finished) == 1
    assert sorted(os.listdir(tmp_path)) == ["metrics.json", "model.keras"]
    assert consistent(tmp_path) and (tmp_path / "model.keras").read_text() == "new"


def test_files_written_together_stay_old_when_the_writing_is_cut_and_only_kbert_names_are_cleaned(tmp_path):
    write_together(tmp_path, write_pair("old"), last="metrics.json")
    before = folder_state(tmp_path)

    def cut(folder):
        write_pair("new")(folder)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_together(tmp_path, cut, last="metrics.json")
    assert folder_state(tmp_path) == before  # nothing of the new files, not even a staging folder
    kbert_made = [".tmp-0badc0de-model.keras", ".tmp-0badc0de-metrics.json"]
    not_kbert = [".tmp-notes.txt", ".tmp-0badc0de-notes.txt", ".tmp-0BADC0DE-model.keras", ".tmp-model.keras"]
    for name in kbert_made + not_kbert:
        (tmp_path / name).write_text("x")
    (tmp_path / ".tmp-1234abcd-together").mkdir()  # a staging folder whose group was never committed
    (tmp_path / ".tmp-1234abcd-together" / "model.keras").write_text("half")
    finished, removed = finish_interrupted_writes(tmp_path, ["model.keras", "metrics.json"])
    assert finished == [] and sorted(map(os.path.basename, removed)) == sorted(kbert_made + [".tmp-1234abcd-together"])
    assert sorted(os.listdir(tmp_path)) == sorted(["metrics.json", "model.keras"] + not_kbert)
    assert consistent(tmp_path) and (tmp_path / "model.keras").read_text() == "old"


def test_only_temporaries_whose_writer_has_ended_are_cleaned(tmp_path):
    from kbert.io.atomic_files import _host

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        host = _host()
        live = f".tmp-0badc0de-{running.pid}@{host}-model.keras"  # another command writing this folder now
        remote = f".tmp-0badc0de-{running.pid}@another.host-model.keras"  # a writer this host cannot ask
        dead = [f".tmp-0badc0de-{ended.pid}@{host}-model.keras",
                f".tmp-0badc0de-{os.getpid()}@{host}-metrics.json",  # an earlier process of this id (a container's)
                ".tmp-0badc0de-model.keras"]  # an older kbert's, which named no writer
        for name in [live, remote] + dead:
            (tmp_path / name).write_text("half")
        staging = tmp_path / f".tmp-1234abcd-{running.pid}@{host}-together"  # a live writer putting its files in
        staging.mkdir()
        write_pair("new")(staging)
        (staging / "committed.json").write_text('{"last": "metrics.json"}\n')
        finished, removed = finish_interrupted_writes(tmp_path, ["model.keras", "metrics.json"])
        assert finished == [] and sorted(map(os.path.basename, removed)) == sorted(dead)
        assert sorted(os.listdir(tmp_path)) == sorted([live, remote, staging.name])
        # A day without a change, another host's writer is taken for gone.
        os.utime(tmp_path / remote, (0, 0))
        assert list(map(os.path.basename, remove_temporary_files(tmp_path))) == [remote]
        # The folder's lock says that no other writer is there: all of it is a dead writer's.
        with hold_lock(tmp_path):
            finished, removed = finish_interrupted_writes(tmp_path, ["model.keras", "metrics.json"])
        assert finished == [str(staging)] and list(map(os.path.basename, removed)) == [live]
        assert sorted(os.listdir(tmp_path)) == ["metrics.json", "model.keras"]
    finally:
        running.kill()
        running.wait()


def test_temporary_names_carry_their_writer(tmp_path):
    name = os.path.basename(make_folder_beside(tmp_path / "prepared"))
    assert re.fullmatch(rf"\.tmp-[0-9a-f]{{8}}-{os.getpid()}@[A-Za-z0-9._]+-prepared", name), name
