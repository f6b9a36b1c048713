"""A run folder has one writer: a second command on it is refused before it cleans or reads anything."""

import os
import subprocess
import sys

import pytest

from kbert import cli
from kbert.io import writer_lock
from kbert.io.writer_lock import LOCK_FILE, hold_lock
from tests.pretraining.pretraining_run import VOCABULARY, write_corpus
from tests.test_case import folder_state

pytestmark = pytest.mark.skipif(writer_lock.fcntl is None, reason="flock is POSIX's")


def commands(tmp_path, out):
    """Each command that writes `out`, with inputs that pass its checks (it is refused before reading them)."""
    for name in ("model.keras", "teacher.keras"):
        (tmp_path / name).write_text("")
    return {
        "train": ["train", "sst2", "--out", str(out)],
        "distill": ["distill", "sst2", "--teacher", str(tmp_path / "teacher.keras"), "--out", str(out)],
        "prune": ["prune", str(tmp_path / "model.keras"), "--task", "sst2", "--out", str(out)],
        "pretrain": ["pretrain", "--corpus", str(tmp_path / "*.txt"), "--out", str(out)],
    }


def a_running_run(out):
    """A run folder as a command leaves it while it writes: logs, and the staging folder of its model."""
    (out / "tensorboard" / "train").mkdir(parents=True)
    (out / "tensorboard" / "train" / "events.out.tfevents.1.host.1.0.v2").write_bytes(b"curves")
    staging = out / f".tmp-0badc0de-{os.getpid()}@host-together"
    staging.mkdir()
    (staging / "model.keras").write_bytes(b"a model being written")


@pytest.mark.parametrize("command", ["train", "distill", "prune", "pretrain"])
def test_a_second_command_on_a_run_folder_is_refused_in_one_line_naming_the_first(tmp_path, capsys, command):
    out = tmp_path / "run"
    out.mkdir()
    a_running_run(out)
    with hold_lock(out, command=f"kbert {command} --out {out}"):
        before = folder_state(out)
        assert cli.main(commands(tmp_path, out)[command]) == 2
        assert folder_state(out) == before  # nothing cleaned, moved aside or replaced
    err = capsys.readouterr().err
    assert err.startswith(f"kbert {command}: error: {out} is in use by another kbert command: process {os.getpid()} "
                          f"(kbert {command} --out {out}), started ")
    assert err.endswith(". Wait for it to end, or choose another --out.\n") and err.count("\n") == 1


def test_the_refusal_names_the_process_that_writes_the_folder(tmp_path, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.argv[0] = 'kbert'\n"  # as the command's own process
         "from kbert.io.writer_lock import hold_lock\n"
         "with hold_lock(sys.argv[-1]):\n    print('held', flush=True); time.sleep(120)",
         "train", "sst2", "--out", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert cli.main(["train", "sst2", "--out", str(out)]) == 2
    finally:
        holder.kill()
        holder.wait()
    assert (f"error: {out} is in use by another kbert command: process {holder.pid} (kbert train sst2 --out {out}), "
            "started ") in capsys.readouterr().err
    assert os.listdir(out) == [LOCK_FILE]  # the killed holder's; the next command takes it over


@pytest.mark.parametrize("command", ["evaluate", "prepare-pretraining"])
def test_an_output_replaced_as_a_whole_is_locked_beside_it(tmp_path, capsys, command):
    out = tmp_path / ("metrics.json" if command == "evaluate" else "prepared")
    for name in ("model.keras", "data.csv", "vocab.txt"):
        (tmp_path / name).write_text("")
    arguments = {"evaluate": ["evaluate", str(tmp_path / "model.keras"), "--data", str(tmp_path / "data.csv")],
                 "prepare-pretraining": ["prepare-pretraining", "--corpus", str(tmp_path / "*.txt"),
                                         "--vocabulary", str(tmp_path / "vocab.txt")]}[command]
    with hold_lock(out, beside=True, command=f"kbert {command} --out {out}"):
        assert cli.main(arguments + ["--out", str(out)]) == 2
    assert f"kbert {command}: error: {out} is in use by another kbert command: process {os.getpid()} " in \
        capsys.readouterr().err


@pytest.mark.parametrize("worker", [0, 1])
def test_under_several_workers_the_chief_alone_holds_the_run_folder(tmp_path, capsys, monkeypatch, worker):
    from tests.backend.test_distribute import free_ports, tf_config

    ports = free_ports(2)
    monkeypatch.setenv("TF_CONFIG", tf_config(ports, worker))
    out = tmp_path / "run"
    with hold_lock(out):  # the chief of this run, say: the other worker writes nothing there
        assert cli.main(["pretrain", "--corpus", "x.txt", "--out", str(out), "--connect-timeout", "1"]) == 2
    err = capsys.readouterr().err
    if worker == 0:
        assert "is in use by another kbert command" in err
    else:  # not refused: it goes on to wait for its chief (never started here)
        assert "is in use" not in err and f"No answer within 1 s from worker 0 at 127.0.0.1:{ports[0]}" in err


def test_a_command_that_fails_leaves_no_lock_and_no_folder_it_made(tmp_path, capsys):
    out = tmp_path / "new" / "run"
    assert cli.main(["pretrain", "--corpus", str(tmp_path / "none*.txt"), "--out", str(out)]) == 2
    assert "matches no file" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_prepare_pretraining_removes_what_a_killed_preparation_left_and_no_running_one(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=3, sentences=10)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    from kbert.io.atomic_files import _host

    host = _host()
    # Shards of a preparation of this folder that was killed, of one by an older kbert, and of one of
    # another folder beside it that still runs.
    left = [tmp_path / f".tmp-0badc0de-{ended.pid}@{host}-prepared", tmp_path / ".tmp-1234abcd-prepared"]
    other = tmp_path / f".tmp-0badc0de-{running.pid}@{host}-prepared-2"
    try:
        for folder in left + [other]:
            folder.mkdir()
            (folder / "pairs-00000.tfrecord").write_bytes(b"half a shard")
        assert cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"),
                         "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared"),
                         "--sequence-length", "32"]) == 0
    finally:
        running.kill()
        running.wait()
    err = capsys.readouterr().err
    for folder in left:
        assert f"{tmp_path / 'prepared'}: removed {folder}, the partial shards of an interrupted preparation." in err
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == [other.name]


def test_a_preparation_killed_between_its_renames_gets_the_old_folder_back(tmp_path):
    from kbert.pretraining.prepared_pairs import remove_interrupted_preparations

    prepared = tmp_path / "prepared"
    aside = tmp_path / ".tmp-0badc0de-prepared"  # the old folder, moved aside; the new one never arrived
    (aside / "prepared").mkdir(parents=True)
    (aside / "prepared" / "metadata.json").write_text("{}")
    lines = remove_interrupted_preparations(prepared)
    assert lines == [f"{prepared}: a preparation that was replacing it was interrupted; the folder it replaced is "
                     "back in place."]
    assert os.listdir(tmp_path) == ["prepared"] and (prepared / "metadata.json").read_text() == "{}"
