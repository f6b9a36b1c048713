"""kbert.export: numbered versions, written atomically, never over an existing one unless told."""

import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.backend import tensorflow_process
from kbert.cli.main import one_line
from kbert.serving import exporter, op_allowlist
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
    # Overwriting replaces an export only, never a folder of someone else's files.
    (folder / "2").mkdir()
    (folder / "2" / "notes.txt").write_text("a user's file")
    with pytest.raises(ValueError, match="not an exported model"):
        kbert.export(classifier, str(folder), version=2, overwrite=True)
    assert os.listdir(folder / "2") == ["notes.txt"]


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


def test_an_export_with_ops_tf_serving_lacks_is_refused_before_it_goes_live(classifier, tmp_path, monkeypatch):
    folder = tmp_path / "spam"
    kbert.export(classifier, str(folder), version=1)
    # An allowlist without the tokenizer's op, as for a model server that lacks it.
    allowlist = tmp_path / "allowed_ops.txt"
    served = sorted(op_allowlist.allowed_ops() - {"FastWordpieceTokenizeWithOffsets"})
    allowlist.write_text("# Served by: an old model server\n" + "\n".join(served) + "\n")
    monkeypatch.setattr(op_allowlist, "ALLOWLIST", allowlist)
    with pytest.raises(ValueError, match=r"Did not export Classifier to .*spam.2: .*an old model server lacks.*"
                                         r"\['FastWordpieceTokenizeWithOffsets'\]"):
        kbert.export(classifier, str(folder))
    with pytest.raises(ValueError, match="FastWordpieceTokenizeWithOffsets"):
        kbert.export(classifier, str(folder), version=1, overwrite=True)
    # No version 2, version 1 untouched, no hidden staging folder left.
    assert sorted(os.listdir(folder)) == ["1"]
    assert "serving_default" in tf.saved_model.load(str(folder / "1")).signatures


def test_work_folders_of_killed_exports_are_cleaned_and_live_ones_kept(classifier, tmp_path):
    folder = tmp_path / "spam"
    folder.mkdir()
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    dead = int(finished.stdout)
    host = exporter._host()

    def work_folder(name, age_s=0, files=("saved_model.pb",)):
        path = folder / name
        path.mkdir(parents=True)
        for file in files:
            (path / file).parent.mkdir(parents=True, exist_ok=True)
            (path / file).write_bytes(b"half")
        then = time.time() - age_s
        os.utime(path, (then, then))
        return path

    day = exporter.STALE_AFTER_S
    work_folder(f".5.partial-{host}-{dead}-abc1")                           # its writer is gone
    work_folder(".6.partial-k3x9_q2m", age_s=day + 60)                      # unnamed writer, a day old
    work_folder(f".7.partial-otherhost-{dead}-abc2", age_s=day + 60)        # another machine's, a day old
    work_folder(f".2.old-{host}-{dead}-abc3", files=("saved_model/saved_model.pb",))  # version 2, moved aside
    live = [
        work_folder(f".8.partial-{host}-{os.getpid()}-abc4"),               # a running writer: this process
        work_folder(f".9.partial-otherhost-{dead}-abc5", age_s=60),         # another machine's, recent
        work_folder(".10.partial-k3x9_q2n", age_s=60),                       # unnamed writer, recent
    ]
    path = kbert.export(classifier, str(folder))
    # Version 2, whose overwrite was killed before the new one arrived, is put back.
    assert (folder / "2" / "saved_model.pb").read_bytes() == b"half"
    assert path == str(folder / "3")
    assert sorted(os.listdir(folder)) == sorted(["2", "3", *(p.name for p in live)])


@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_the_version_follows_the_umask_so_a_server_of_another_user_can_read_it(classifier, tmp_path, umask,
                                                                               folder_mode, file_mode):
    old = os.umask(umask)
    try:
        path = kbert.export(classifier, str(tmp_path / "spam"))
    finally:
        os.umask(old)
    modes = {path: stat.S_IMODE(os.stat(path).st_mode)}
    for root, folders, files in os.walk(path):
        for name in folders + files:
            modes[os.path.join(root, name)] = stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode)
    assert any(name.endswith("saved_model.pb") for name in modes)
    for name, mode in modes.items():
        expected = folder_mode if os.path.isdir(name) else file_mode
        assert mode == expected, f"{name}: {oct(mode)}, expected {oct(expected)}"


# Another process that loads the model, says it is ready, and exports once told to go.
RACER = """
import os, sys, time
import kbert
model_file, ready, go, folder = sys.argv[1:]
model = kbert.load_model(model_file)
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
print(kbert.export(model, folder))
"""


def test_two_exports_started_at_once_get_a_version_each(classifier, tmp_path):
    classifier.save(str(tmp_path / "spam.keras"))
    folder, ready, go = tmp_path / "spam", tmp_path / "ready", tmp_path / "go"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Output to files, not pipes: nothing reads them while the process starts.
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        other = subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path / "spam.keras"), str(ready), str(go), str(folder)],
            cwd=root, env={**os.environ, "KERAS_BACKEND": "tensorflow"}, stdout=out, stderr=err,
        )
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert other.poll() is None, (tmp_path / "err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the other export's process did not start"
            time.sleep(0.05)
        go.touch()
        # Both choose version 1, seconds before either renames its export into place.
        paths = {kbert.export(classifier, str(folder))}
        assert other.wait(timeout=300) == 0, (tmp_path / "err").read_text()[-3000:]
    finally:
        if other.poll() is None:
            other.kill()
    paths.add((tmp_path / "out").read_text().strip().splitlines()[-1])
    assert paths == {str(folder / "1"), str(folder / "2")}
    assert sorted(os.listdir(folder)) == ["1", "2"]  # no hidden work folder left
    for path in paths:
        assert "serving_default" in tf.saved_model.load(path).signatures


def test_a_version_another_export_writes_meanwhile_is_never_replaced(classifier, tmp_path, monkeypatch):
    folder = tmp_path / "spam"
    rename = exporter._rename_no_replace
    taken = []

    def another_export_first(source, target):
        if len(taken) < 2:  # another export's version arrives just before the rename, twice
            os.mkdir(target)
            with open(os.path.join(target, "saved_model.pb"), "wb") as f:
                f.write(b"theirs")
            taken.append(os.path.basename(target))
        rename(source, target)

    monkeypatch.setattr(exporter, "_rename_no_replace", another_export_first)
    # A version given is not replaced, and not moved to another one.
    with pytest.raises(FileExistsError, match=r"^Version 3 in \S+spam was written by another export meanwhile; "
                                              r"export to another version, or pass overwrite=True"):
        kbert.export(classifier, str(folder), version=3)
    # A version chosen by export moves on to the next free one.
    assert kbert.export(classifier, str(folder)) == str(folder / "5")
    assert taken == ["3", "4"]
    for version in taken:
        assert os.listdir(folder / version) == ["saved_model.pb"]
        assert (folder / version / "saved_model.pb").read_bytes() == b"theirs"
    assert sorted(os.listdir(folder)) == ["3", "4", "5"]  # no hidden work folder left
    assert "serving_default" in tf.saved_model.load(str(folder / "5")).signatures


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "check-then-rename"])
def test_a_rename_into_place_never_replaces_even_an_empty_folder(tmp_path, monkeypatch, renameat2):
    if not renameat2:
        monkeypatch.setattr(exporter, "_renameat2", lambda: None)
    elif exporter._renameat2() is None:
        pytest.skip("no renameat2 on this system")
    staged = tmp_path / ".1.partial"
    staged.mkdir()
    (staged / "saved_model.pb").write_bytes(b"new")
    (tmp_path / "1").mkdir()  # os.rename would replace it
    with pytest.raises(FileExistsError):
        exporter._rename_no_replace(str(staged), str(tmp_path / "1"))
    assert os.listdir(tmp_path / "1") == []
    exporter._rename_no_replace(str(staged), str(tmp_path / "2"))
    assert (tmp_path / "2" / "saved_model.pb").read_bytes() == b"new"
    assert not staged.exists()


def _is_gone(pid):
    """Whether process `pid` has ended (a zombie no one reaped yet has ended too)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_an_export_process_dies_with_its_parent_and_publishes_nothing(tmp_path):
    # The export process's real start, then a stand-in for the export that
    # publishes its version after 3 s; its parent is SIGKILLed at once.
    assert tensorflow_process.ANSWER.startswith(tensorflow_process.DIE_WITH_CALLER)
    version = tmp_path / "spam" / "1"
    child = tensorflow_process.DIE_WITH_CALLER + f"import time\ntime.sleep(3)\nos.makedirs({str(version)!r})\n"
    parent = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}, '{{}}', str(os.getpid())])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child_pid = int(process.stdout.readline())
    time.sleep(0.3)  # the child has set its signal by now (else it sees its parent gone and ends)
    process.kill()
    process.wait()
    while not _is_gone(child_pid) and time.monotonic() - started < 10:
        time.sleep(0.05)
    assert _is_gone(child_pid) and time.monotonic() - started < 3, "the export process outlived its parent"
    time.sleep(max(0.0, started + 3.5 - time.monotonic()))
    assert not version.exists()


def test_an_export_process_whose_parent_died_publishes_nothing(classifier, tmp_path, capsys):
    # Where no parent-death signal kills it (not Linux), the export process
    # still checks its parent before the version goes live.
    model_file = str(tmp_path / "spam.keras")
    classifier.save(model_file)
    arguments = {"model": model_file, "directory": str(tmp_path / "spam"), "version": None, "overwrite": False,
                 "text_pairs": None}
    # This process is not its own parent.
    tensorflow_process.answer("kbert.serving.exporter:export_file", json.dumps(arguments), os.getpid())
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"error": "ChildProcessError", "message": f"Did not export to {tmp_path / 'spam' / '1'}: "
                      "the process that asked for the export has ended."}
    assert os.listdir(tmp_path / "spam") == []


def _file_size_limit(limit):
    """Sets this process's file size limit (RLIMIT_FSIZE); a write past it fails with EFBIG, as on a full disk."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX's")
def test_the_export_process_fails_in_one_line_naming_the_file(classifier, tmp_path, monkeypatch):
    import resource

    folder = tmp_path / "spam"
    # The temporary .keras for the TensorFlow process cannot be written.
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    _file_size_limit(10_000)
    try:
        with pytest.raises(OSError) as caught:
            exporter._export_in_tensorflow(classifier, str(folder), None, False, None)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
    assert caught.value.errno == 27 and caught.value.filename.endswith("model.keras")
    assert "File too large" in str(caught.value) and "\n" not in str(caught.value)
    assert one_line(caught.value).startswith(f"{caught.value.filename}: File too large")

    # The TensorFlow process cannot write the SavedModel (its disk is full).
    real_run = subprocess.run
    monkeypatch.setattr(tensorflow_process.subprocess, "run",
                        lambda *args, **kwargs: real_run(*args, **kwargs, preexec_fn=lambda: _file_size_limit(50_000)))
    with pytest.raises(OSError) as caught:
        exporter._export_in_tensorflow(classifier, str(folder), None, False, None)
    message = str(caught.value)
    assert "File too large" in message and "\n" not in message and len(message) < 500, message
    assert kbert.serving.versions(str(folder)) == []


def test_an_export_of_a_fine_tuned_model_holds_its_weights_and_no_optimizer(exported):
    # The fitted classifier's AdamW slots are twice its weights; a model server needs none of them.
    model, path = exported["classifier"]
    assert int(model.optimizer.iterations.numpy()) > 0 and model.optimizer.variables
    saved = dict(tf.train.list_variables(os.path.join(path, "variables", "variables")))
    assert not [name for name in saved if "optimizer" in name]
    weight_bytes = sum(int(np.prod(weight.shape)) * 4 for weight in model.weights)
    folder = os.path.join(path, "variables")
    data = sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)
               if name.startswith("variables.data"))
    assert weight_bytes <= data < 1.2 * weight_bytes + 4096
