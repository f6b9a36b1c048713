"""One writer per output: the lock a `kbert` command holds on what it writes."""

import os
import signal
import subprocess
import sys
import time

import pytest

from kbert.io import writer_lock
from kbert.io.writer_lock import LOCK_FILE, OutputInUseError, hold_lock, holder, holds_lock, lock_file

pytestmark = pytest.mark.skipif(writer_lock.fcntl is None, reason="flock is POSIX's")

# A process that holds the lock until it is killed; light: `kbert` as argv[0] loads no TensorFlow.
HOLDER = """
import sys, time
sys.argv[0] = "kbert"
from kbert.io.writer_lock import hold_lock
with hold_lock(sys.argv[1], beside=sys.argv[2] == "beside", command="kbert pretrain --out " + sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def held_elsewhere():
    """Starts processes that hold the lock of an output; kills them (SIGKILL) when the test ends."""
    started = []

    def start(output, beside=False):
        process = subprocess.Popen([sys.executable, "-c", HOLDER, str(output), "beside" if beside else "inside"],
                                   stdout=subprocess.PIPE, text=True, start_new_session=True)
        started.append(process)
        assert process.stdout.readline() == "held\n"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_a_second_writer_is_refused_in_one_line_naming_the_first(tmp_path):
    run = tmp_path / "run"
    with hold_lock(run, command="kbert train sst2 --out run"):
        assert (run / LOCK_FILE).is_file() and holds_lock(run) and holds_lock(run / "checkpoints")
        assert holder(run)["pid"] == os.getpid()
        with pytest.raises(OutputInUseError) as caught:
            with hold_lock(run, flag="--out"):
                pytest.fail("two writers")
    message = str(caught.value)
    assert message == (f"{run} is in use by another kbert command: process {os.getpid()} (kbert train sst2 --out "
                       f"run), started {holder_started(message)}. Wait for it to end, or choose another --out.")
    assert "\n" not in message
    # Released: its file is gone, and the next writer takes the lock.
    assert os.listdir(run) == [] and not holds_lock(run)
    with hold_lock(run):
        pass


def holder_started(message):
    return message.split(", started ")[1].split(".")[0]


def test_the_lock_of_another_process_is_refused_until_it_dies_even_by_sigkill(tmp_path, held_elsewhere):
    run = tmp_path / "run"
    process = held_elsewhere(run)
    with pytest.raises(OutputInUseError, match=rf"process {process.pid} \(kbert pretrain --out {run}\)"):
        with hold_lock(run):
            pass
    assert not holds_lock(run)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert holder(run)["pid"] == process.pid  # its file stays: a killed writer cannot remove it
    with hold_lock(run, command="kbert pretrain --out run"):  # the system freed its lock
        found = holder(run)
        assert (found["pid"], found["command"]) == (os.getpid(), "kbert pretrain --out run")
    assert not (run / LOCK_FILE).exists()


def test_an_output_replaced_as_a_whole_is_locked_beside_it(tmp_path, held_elsewhere):
    prepared = tmp_path / "data" / "prepared"
    assert lock_file(prepared, beside=True) == str(tmp_path / "data" / f"{LOCK_FILE}-prepared")
    with hold_lock(prepared, beside=True):
        assert not prepared.exists() and os.listdir(tmp_path / "data") == [f"{LOCK_FILE}-prepared"]
        assert holds_lock(prepared) and not holds_lock(tmp_path / "data")
        with hold_lock(tmp_path / "data" / "other", beside=True):  # another output beside it: another lock
            pass
    process = held_elsewhere(prepared, beside=True)
    with pytest.raises(OutputInUseError, match=f"process {process.pid} "):
        with hold_lock(prepared, beside=True):
            pass


def test_a_lock_file_removed_by_its_holder_meanwhile_is_made_again(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    flock = writer_lock.fcntl.flock
    calls = []

    def holder_releases_first(descriptor, operation):
        if not calls:  # between our open and our flock, the holder removed its file and ended
            os.remove(run / LOCK_FILE)
        calls.append(descriptor)
        return flock(descriptor, operation)

    monkeypatch.setattr(writer_lock.fcntl, "flock", holder_releases_first)
    with hold_lock(run):
        assert len(calls) == 2  # the first lock was of a file no one else would find
        assert (run / LOCK_FILE).is_file() and holder(run)["pid"] == os.getpid()


def test_what_cannot_be_locked_runs_unlocked_and_the_command_says_why(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("a user's file")
    with hold_lock(a_file):  # a file where a run folder should be: `--out ... is a file` comes from the command
        assert not holds_lock(a_file)
    assert a_file.read_text() == "a user's file"


def test_the_holder_is_read_while_it_writes_it(tmp_path):
    run = tmp_path / "run"
    with hold_lock(run):
        (run / LOCK_FILE).write_text("")  # as if the holder had not written its details yet
        started = time.monotonic()
        with pytest.raises(OutputInUseError, match="in use by another kbert command: another process"):
            with hold_lock(run):
                pass
        assert time.monotonic() - started < 5
