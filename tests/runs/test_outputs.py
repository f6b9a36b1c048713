"""The commands check their arguments before any work, replace nothing by surprise and lose nothing.

Each test states what a command may not change, then hashes the folder
before and after (`folder_state`).
"""

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import kbert
from kbert import cli
from kbert.runs.outputs import EARLIER_RUNS
from tests.test_case import TINY_VOCABULARY, file_size_limit, folder_state

KBERT = os.path.join(os.path.dirname(sys.executable), "kbert")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A tiny classifier's `.keras` file, outside the tests' own folders."""
    model = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8,
                             num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    model.fit(["the cat", "a dog"], [0, 1], epochs=1, verbose=0)
    path = tmp_path_factory.mktemp("model") / "model.keras"
    model.save(str(path))
    return str(path)


def fails(arguments, capsys, folder):
    """Runs `kbert ARGUMENTS...`, which must fail with exit status 2 and change nothing in `folder`; its stderr."""
    before = folder_state(folder)
    try:
        status = cli.main(arguments)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert folder_state(folder) == before
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"kbert {arguments[0]}: error: "), err
    assert "Traceback" not in err
    return last


@pytest.mark.parametrize("arguments, flag", [
    (["train", "sst2", "--learning-rate", "-1"], "--learning-rate"),
    (["train", "sst2", "--learning-rate", "nan"], "--learning-rate"),
    (["train", "sst2", "--learning-rate", "0"], "--learning-rate"),
    (["train", "sst2", "--connect-timeout", "-5"], "--connect-timeout"),
    (["pretrain", "--corpus", "corpus.txt", "--learning-rate", "inf"], "--learning-rate"),
    (["pretrain", "--corpus", "corpus.txt", "--mask-rate", "1"], "--mask-rate"),
    (["prune", "MODEL", "--task", "sst2", "--sparsity", "1"], "--sparsity"),
    (["prune", "MODEL", "--task", "sst2", "--heads", "-0.1"], "--heads"),
    (["distill", "sst2", "--teacher", "MODEL", "--alpha", "1.5"], "--alpha"),
    (["distill", "sst2", "--teacher", "MODEL", "--temperature", "0"], "--temperature"),
])
def test_values_out_of_range_are_refused_by_flag_before_any_work(tmp_path, capsys, model_file, arguments,
                                                                 flag):
    arguments = [model_file if a == "MODEL" else a for a in arguments] + ["--out", str(tmp_path / "run")]
    line = fails(arguments, capsys, tmp_path)
    assert f"argument {flag}: must be" in line
    assert not (tmp_path / "run").exists()


def test_outputs_and_inputs_of_the_wrong_kind_are_refused_before_any_work(tmp_path, capsys, model_file):
    (tmp_path / "notes.txt").write_text("not a folder\n")
    (tmp_path / "folder").mkdir()
    notes, folder = str(tmp_path / "notes.txt"), str(tmp_path / "folder")
    cases = [
        (["export", model_file, "--name", "m", "--out", notes], "--out", "is a file, not a folder"),
        (["demo", "--export-dir", notes], "--export-dir", "is a file, not a folder"),
        (["prepare-pretraining", "--corpus", notes, "--vocabulary", notes, "--out", notes, "--overwrite"],
         "--out", "is a file, not a folder"),
        (["evaluate", model_file, "--task", "sst2", "--out", folder], "--out", "is a folder"),
        (["vocabulary", notes, "--out", folder], "--out", "is a folder"),
        (["train", "sst2", "--vocabulary", folder, "--out", str(tmp_path / "run")], "--vocabulary",
         "is a folder"),
        (["predict", folder, "--file", folder], "--file", "is a folder"),
        (["distill", "sst2", "--teacher", model_file, "--unlabeled", folder, "--out", str(tmp_path / "run")],
         "--unlabeled", "is a folder"),
        (["evaluate", folder, "--task", "sst2"], "MODEL", "is a folder"),
        (["pretrain", "--corpus", notes, "--vocabulary", str(tmp_path / "none.txt"), "--out",
          str(tmp_path / "new" / "run")], "--vocabulary", "no such file"),
    ]
    for arguments, flag, problem in cases:
        line = fails(arguments, capsys, tmp_path)
        assert flag in line and problem in line, line


def test_no_output_is_replaced_without_overwrite(tmp_path, capsys, model_file):
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat\n" * 5)
    for name in ("vocab.txt", "metrics.json", "prepared/metadata.json", "run/model.keras", "run/metrics.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("a user's file\n")
    cases = [
        ["vocabulary", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "vocab.txt")],
        ["evaluate", model_file, "--task", "sst2", "--out", str(tmp_path / "metrics.json")],
        ["train", "sst2", "--out", str(tmp_path / "run")],
        ["prune", model_file, "--task", "sst2", "--sparsity", "0.5", "--out", str(tmp_path / "run")],
        ["prepare-pretraining", "--corpus", str(tmp_path / "corpus.txt"), "--vocabulary",
         str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared")],
    ]
    for arguments in cases:
        assert "--overwrite" in fails(arguments, capsys, tmp_path)


def test_overwrite_replaces_a_prepared_corpus_only(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "book.txt").write_text("the cat sat on the mat . the dog sat .\n\n" * 20)
    (tmp_path / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n")
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "thesis.txt").write_text("years of work\n")

    def prepare(out, seed=0):
        return ["prepare-pretraining", "--corpus", str(corpus), "--vocabulary", str(tmp_path / "vocab.txt"),
                "--out", str(out), "--sequence-length", "16", "--seed", str(seed), "--overwrite"]

    assert "not a folder of kbert pretraining data" in fails(prepare(tmp_path / "thesis"), capsys, tmp_path)
    assert "one of the command's own inputs" in fails(prepare(corpus), capsys, tmp_path)
    assert "one of the command's own inputs" in fails(prepare(tmp_path), capsys, tmp_path)

    assert cli.main(prepare(tmp_path / "prepared")) == 0
    first = folder_state(tmp_path / "prepared")
    others = {path: digest for path, digest in folder_state(tmp_path).items() if not path.startswith("prepared")}
    assert cli.main(prepare(tmp_path / "prepared", seed=1)) == 0  # replaced: kbert made it
    assert folder_state(tmp_path / "prepared") != first
    assert {path: digest for path, digest in folder_state(tmp_path).items()
            if not path.startswith("prepared")} == others
    capsys.readouterr()


def test_export_overwrite_replaces_an_exported_version_only(tmp_path, capsys, model_file):
    (tmp_path / "served" / "spam" / "1").mkdir(parents=True)
    (tmp_path / "served" / "spam" / "1" / "notes.txt").write_text("a user's file\n")
    line = fails(["export", model_file, "--name", "spam", "--out", str(tmp_path / "served"), "--version", "1",
                  "--overwrite"], capsys, tmp_path)
    assert "is not an exported model" in line


def test_a_run_folder_keeps_its_earlier_logs_aside_and_says_so(tmp_path, capsys, monkeypatch, model_file):
    """A rerun after Ctrl-C, or with --overwrite, starts clean in TensorBoard without deleting anything."""
    import kbert.runs.fine_tuning

    run = tmp_path / "run"
    (run / "tensorboard" / "train").mkdir(parents=True)
    (run / "tensorboard" / "train" / "events.out.tfevents.1").write_bytes(b"the interrupted run's curves")
    logs = folder_state(run / "tensorboard")

    def interrupted(*args, **kwargs):
        os.makedirs(run / "tensorboard" / "train")
        raise KeyboardInterrupt

    monkeypatch.setattr(kbert.runs.fine_tuning, "fine_tune", interrupted)
    assert cli.main(["train", "sst2", "--out", str(run)]) == 130
    out, err = capsys.readouterr()
    assert err.strip() == ("kbert train: interrupted; run it again to start over (the logs so far are moved "
                           "aside), or pass another --out.")
    assert "held an unfinished run (interrupted?)" in out and "starts from the beginning" in out
    [aside] = (run / EARLIER_RUNS).iterdir()
    assert folder_state(aside / "tensorboard") == logs

    # A finished run is replaced with --overwrite only, and never over its own input.
    (run / "model.keras").write_bytes(open(model_file, "rb").read())
    (run / "metrics.json").write_text("{}\n")
    line = fails(["prune", str(run / "model.keras"), "--task", "sst2", "--sparsity", "0.5", "--out", str(run),
                  "--overwrite"], capsys, tmp_path)
    assert "one of its own inputs" in line
    monkeypatch.setattr(kbert.runs.fine_tuning, "fine_tune", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a bug in kbert still shows its traceback
        cli.main(["train", "sst2", "--out", str(run), "--overwrite"])
    assert "held a finished run, replaced" in capsys.readouterr().out
    assert (run / "model.keras").exists() and len(list((run / EARLIER_RUNS).iterdir())) >= 1


def test_ctrl_c_ends_a_command_with_one_line(tmp_path):
    """SIGINT while `kbert predict --file -` waits for its standard input."""
    # As from a terminal: pytest-xdist's workers ignore SIGINT, and a child would inherit that.
    command = subprocess.Popen([KBERT, "predict", str(tmp_path), "--file", "-"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and not waits_on_standard_input(command.pid):
        time.sleep(0.05)
    command.send_signal(signal.SIGINT)
    _, err = command.communicate(timeout=60)
    command.stdin.close()
    assert command.returncode == 130
    assert err == "kbert predict: interrupted.\n"


def waits_on_standard_input(pid):
    """Whether process `pid` is in a read of its standard input (Linux); after 5 s, True where that cannot be seen."""
    try:
        with open(f"/proc/{pid}/syscall") as syscall:
            return syscall.read().startswith("0 0x0 ")  # read(2) on file descriptor 0
    except OSError:  # no /proc, or it is closed to this process
        time.sleep(5)
        return True


def test_an_unreadable_model_file_is_named_and_not_called_missing(tmp_path, capsys, model_file):
    data = open(model_file, "rb").read()
    (tmp_path / "truncated.keras").write_bytes(data[: len(data) // 2])
    with zipfile.ZipFile(model_file) as archive, zipfile.ZipFile(tmp_path / "no_config.keras", "w") as copy:
        for item in archive.infolist():
            if item.filename != "config.json":
                copy.writestr(item, archive.read(item.filename))
    with zipfile.ZipFile(model_file) as archive:
        member = archive.getinfo("model.weights.h5")
        start = member.header_offset + 30 + len(member.filename) + len(member.extra)
    corrupt = bytearray(data)
    corrupt[start + member.compress_size // 2] ^= 0xFF  # a flipped byte in the weights
    (tmp_path / "bad_crc.keras").write_bytes(bytes(corrupt))
    for name, problem in [("truncated", "not a whole zip archive"), ("no_config", "lacks config.json"),
                          ("bad_crc", "")]:
        path = str(tmp_path / f"{name}.keras")
        line = fails(["evaluate", path, "--task", "sst2"], capsys, tmp_path)
        assert f"{path} is not a valid .keras file" in line and problem in line and "not found" not in line


def test_a_full_disk_fails_an_export_in_one_line_and_keeps_the_served_versions(tmp_path, capsys, model_file):
    served = str(tmp_path / "served")
    assert cli.main(["export", model_file, "--name", "spam", "--out", served]) == 0
    capsys.readouterr()
    with file_size_limit(4096):
        line = fails(["export", model_file, "--name", "spam", "--out", served], capsys, tmp_path)
    assert "File too large" in line or "file too large" in line.lower()
    assert sorted(os.listdir(os.path.join(served, "spam"))) == ["1"]  # no partial version left


def test_a_folder_it_cannot_write_is_refused_before_any_work(tmp_path):
    """As a user without rights on the folder (root ignores a folder's mode, so the test drops root)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp()  # pytest's own folders are closed to other users
    try:
        os.chmod(folder, 0o755)
        os.mkdir(os.path.join(folder, "read-only"), 0o555)
        with open(os.path.join(folder, "corpus.txt"), "w") as corpus:
            corpus.write("the cat sat on the mat\n")
        os.chmod(os.path.join(folder, "corpus.txt"), 0o644)
        prefix = []
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                pytest.skip("needs setpriv to run as a user without root's rights")
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            if subprocess.run(prefix + [KBERT, "--help"], cwd=folder, capture_output=True).returncode != 0:
                pytest.skip("the other user cannot run this checkout's kbert (its folder is closed to them)")
        result = subprocess.run(prefix + [KBERT, "vocabulary", "corpus.txt", "--size", "10", "--out",
                                          "read-only/vocab.txt"], cwd=folder, capture_output=True, text=True)
        assert result.returncode == 2
        assert result.stderr == (f"kbert vocabulary: error: --out read-only/vocab.txt: "
                                 f"{os.path.join(folder, 'read-only')} is not writable.\n")
        assert os.listdir(os.path.join(folder, "read-only")) == []
    finally:
        shutil.rmtree(folder)


def test_a_run_folder_is_told_apart_from_what_a_killed_run_left(tmp_path, capsys, model_file):
    """metrics.json marks a finished run (as in run folders of earlier kbert versions); a model alone is unfinished."""
    from kbert.io.atomic_files import write_together

    run = tmp_path / "run"
    run.mkdir()
    (run / "model.keras").write_bytes(open(model_file, "rb").read())  # an older kbert, killed while evaluating
    line = fails(["train", "sst2", "--out", str(run)], capsys, tmp_path)
    assert "holds the model.keras of a run that did not finish (no metrics.json); pass --overwrite" in line

    # Killed after its files were complete, while they were put in place: the next command completes them.
    def write(folder):
        (Path(folder) / "model.keras").write_bytes(open(model_file, "rb").read())
        (Path(folder) / "metrics.json").write_text('{"settings": {"seed": 5}}\n')

    def killed(*args):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            write_together(run, write, last="metrics.json")
    assert sorted(os.listdir(run))[1:] == ["model.keras"] and not (run / "metrics.json").exists()
    assert cli.main(["train", "sst2", "--out", str(run)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"{run}: an earlier run was interrupted while its files were put in place; it is now "
                      "complete (the folder holds the run of its metrics.json).")
    assert err[1].startswith(f"kbert train: error: --out {run} holds a finished run (model.keras, metrics.json)")
    assert sorted(os.listdir(run)) == ["metrics.json", "model.keras"]


def test_what_the_commands_write_has_the_modes_the_umask_gives(tmp_path, capsys, model_file):
    """Prepared corpora and exports, as any new file: 0666 and 0777 less the umask (not tempfile's private 0600/0700)."""
    import stat

    (tmp_path / "corpus.txt").write_text("the cat sat on the mat . the dog sat .\n\n" * 20)
    (tmp_path / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n")
    mask = os.umask(0o027)
    try:
        assert cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus.txt"), "--vocabulary",
                         str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared"),
                         "--sequence-length", "16"]) == 0
        assert cli.main(["export", model_file, "--name", "spam", "--out", str(tmp_path / "served")]) == 0
    finally:
        os.umask(mask)
    capsys.readouterr()
    for output in ("prepared", "served"):
        for path in [tmp_path / output, *(tmp_path / output).rglob("*")]:
            assert stat.S_IMODE(path.stat().st_mode) == (0o750 if path.is_dir() else 0o640), path
