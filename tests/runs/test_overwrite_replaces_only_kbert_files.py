"""`--overwrite` replaces kbert's own regular files, and nothing else: no pipe, device, socket or link, no file of yours.

Through the commands, as a user meets them. A named pipe in a folder is
never opened here (hashing it, as `folder_state` does, would wait for a
writer): what a test checks is that it is still a named pipe.
"""

import os
import socket
import stat

import pytest

import kbert
from kbert import cli
from tests.test_case import TINY_VOCABULARY, cli_refusal, folder_state


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """A tiny classifier's `.keras` file."""
    model = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8,
                             num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    model.fit(["the cat", "a dog"], [0, 1], epochs=1, verbose=0)
    path = tmp_path_factory.mktemp("model") / "model.keras"
    model.save(str(path))
    return str(path)


def refused(arguments, capsys):
    """Runs `kbert ARGUMENTS...`, which must fail in one line (exit status 2); the line, its prefix kept."""
    return f"kbert {arguments[0]}: error: " + cli_refusal(capsys, *arguments)


def is_fifo(path):
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_no_output_flag_writes_over_a_named_pipe_or_a_socket(tmp_path, capsys, model_file):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n" * 5)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    (tmp_path / "link").symlink_to(pipe)  # a link to a pipe is a pipe
    for out in (pipe, tmp_path / "link"):
        for overwrite in ([], ["--overwrite"]):
            cases = [
                ["vocabulary", str(corpus), "--out", str(out)],
                ["evaluate", model_file, "--task", "sst2", "--out", str(out)],
                ["predict", model_file, "the cat", "--out", str(out)],
            ]
            for arguments in cases:
                line = refused(arguments + overwrite, capsys)
                assert f"--out {out} is a named pipe (FIFO)" in line and "not a regular file" in line, line
    assert is_fifo(pipe) and os.path.islink(tmp_path / "link")

    # A link to a regular file: replacing it would lose the user's link,
    # writing through it would change a file kbert did not write.
    kept = tmp_path / "kept.txt"
    kept.write_text("the user's\n")
    (tmp_path / "file-link").symlink_to(kept)
    for arguments in (["vocabulary", str(corpus)], ["predict", model_file, "the cat"]):
        line = refused(arguments + ["--out", str(tmp_path / "file-link"), "--overwrite"], capsys)
        assert f"--out {tmp_path / 'file-link'} is a symbolic link (to {kept})" in line, line
    assert os.path.islink(tmp_path / "file-link") and kept.read_text() == "the user's\n"

    # A socket, as a device would be: its kind is named.
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "socket"))
        line = refused(["vocabulary", str(corpus), "--out", str(tmp_path / "socket"), "--overwrite"], capsys)
        assert "is a socket, not a regular file" in line
    finally:
        server.close()


def test_a_run_folder_whose_own_files_are_pipes_is_refused(tmp_path, capsys, model_file):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.json")
    for arguments in (["train", "sst2", "--out", str(run), "--overwrite"],
                      ["prune", model_file, "--task", "sst2", "--out", str(run), "--overwrite"],
                      ["distill", "sst2", "--teacher", model_file, "--out", str(run), "--overwrite"]):
        line = refused(arguments, capsys)
        assert f"--out {run}: its metrics.json is a named pipe (FIFO)" in line, line
    pretraining = tmp_path / "pretraining"
    pretraining.mkdir()
    os.mkfifo(pretraining / "vocab.txt")  # a resumed run would read it, and wait
    line = refused(["pretrain", "--corpus", str(tmp_path / "run"), "--out", str(pretraining)], capsys)
    assert "its vocab.txt is a named pipe (FIFO)" in line
    (run / "metrics.json").unlink()
    (run / "metrics.json").symlink_to(tmp_path / "elsewhere.json")  # a link to nothing, as well
    line = refused(["train", "sst2", "--out", str(run), "--overwrite"], capsys)
    assert f"--out {run}: its metrics.json is a symbolic link" in line, line
    os.unlink(run / "metrics.json")
    os.mkfifo(run / "metrics.json")
    assert is_fifo(run / "metrics.json") and is_fifo(pretraining / "vocab.txt")


def test_prepare_pretraining_replaces_only_a_folder_of_its_own_files(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat . the dog sat .\n\n" * 10)
    (tmp_path / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n")
    out = tmp_path / "prepared"
    arguments = ["prepare-pretraining", "--corpus", str(tmp_path / "corpus.txt"), "--vocabulary",
                 str(tmp_path / "vocab.txt"), "--out", str(out), "--sequence-length", "16", "--overwrite"]
    assert cli.main(arguments) == 0
    capsys.readouterr()
    (out / "NOTES.md").write_text("where this corpus came from\n")
    (out / "drafts").mkdir()
    (out / "drafts" / "draft.txt").write_text("a user's file\n")
    before = folder_state(out)
    line = refused(arguments, capsys)
    assert f"{out} holds what prepare-pretraining did not write (NOTES.md, drafts/)" in line, line
    assert folder_state(out) == before  # nothing replaced, nothing deleted

    # Its own files only, and a file of its own that is a named pipe is not one.
    os.rename(out / "NOTES.md", tmp_path / "NOTES.md")
    os.rename(out / "drafts", tmp_path / "drafts")
    os.remove(out / "vocab.txt")
    os.mkfifo(out / "vocab.txt")
    assert "vocab.txt is a named pipe (FIFO)" in refused(arguments, capsys)
    os.remove(out / "vocab.txt")
    (out / "vocab.txt").write_text("\n".join(TINY_VOCABULARY) + "\n")
    assert cli.main(arguments + ["--seed", "1"]) == 0
    assert sorted(os.listdir(out)) == ["metadata.json", "pairs-00000.tfrecord", "vocab.txt"]
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []  # nothing left aside


def test_export_overwrite_keeps_what_the_export_does_not_write(tmp_path, capsys, model_file):
    """TF Serving's warm-up requests live in the version folder, beside the SavedModel: they stay."""
    out = tmp_path / "served"
    arguments = ["export", model_file, "--name", "spam", "--out", str(out), "--version", "1", "--overwrite"]
    assert cli.main(arguments) == 0
    capsys.readouterr()
    version = out / "spam" / "1"
    (version / "assets.extra").mkdir()
    (version / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"\x00warm-up records\xff")
    (version / "README").write_text("served since Monday\n")
    kept = {path: digest for path, digest in folder_state(version).items()
            if path.startswith(("assets.extra", "README"))}
    os.utime(version / "saved_model.pb", (0, 0))  # to tell the new version from the old
    assert cli.main(arguments) == 0
    capsys.readouterr()
    assert os.stat(version / "saved_model.pb").st_mtime > 0  # replaced
    state = folder_state(version)
    assert {path: digest for path, digest in state.items() if path.startswith(("assets.extra", "README"))} == kept
    assert [name for name in os.listdir(out / "spam") if name != "1"] == []  # nothing left aside

    # What cannot be carried over (a named pipe) is refused before any work.
    os.mkfifo(version / "assets.extra" / "pipe")
    line = refused(arguments, capsys)
    assert f"{version}/assets.extra/pipe is a named pipe (FIFO)" in line and "does not replace" in line, line
    assert is_fifo(version / "assets.extra" / "pipe")
    assert sorted(os.listdir(out / "spam")) == ["1"]
