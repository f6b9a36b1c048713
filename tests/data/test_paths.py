import io
import urllib.error
import zipfile
from pathlib import Path

import pytest

from kbert.data import data_dir, find_data_file, paths
from kbert.data.paths import DataSource, cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_data_dir(tmp_path, monkeypatch):
    """An empty KBERT_DATA folder and an empty KBERT_CACHE folder."""
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()
    return tmp_path


def zip_bytes(members):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def serve(monkeypatch, content):
    """Makes `fetch_url` write `content` and records the URLs it was asked for."""
    requested = []

    def fake_fetch(url, out_file):
        requested.append(url)
        out_file.write(content)

    monkeypatch.setattr(paths, "fetch_url", fake_fetch)
    return requested


def forbid_network(monkeypatch):
    def no_fetch(url, out_file):
        raise AssertionError(f"unexpected download of {url}")

    monkeypatch.setattr(paths, "fetch_url", no_fetch)


def files_under(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_default_data_dir_is_shared_data_next_to_repository(monkeypatch):
    monkeypatch.delenv("KBERT_DATA", raising=False)
    assert data_dir() == (REPO_ROOT.parent / "shared" / "data").resolve()


def test_kbert_data_overrides_data_dir(empty_data_dir):
    (empty_data_dir / "data" / "a.txt").write_text("x")
    assert data_dir() == (empty_data_dir / "data").resolve()
    assert find_data_file("a.txt") == (empty_data_dir / "data" / "a.txt").resolve()


def test_cache_dir_defaults_to_home_cache(monkeypatch):
    monkeypatch.delenv("KBERT_CACHE", raising=False)
    assert cache_dir() == Path.home() / ".cache" / "kbert" / "data"


def test_existing_file_is_found_without_download(empty_data_dir, monkeypatch):
    forbid_network(monkeypatch)
    target = empty_data_dir / "data" / "glue" / "RTE" / "dev.tsv"
    target.parent.mkdir(parents=True)
    target.write_text("x")
    source = DataSource("https://example.invalid/RTE.zip", "RTE/dev.tsv")
    assert find_data_file("glue/RTE/dev.tsv", source) == target.resolve()


def test_missing_file_without_source_names_path_and_env_var(empty_data_dir, monkeypatch):
    forbid_network(monkeypatch)
    with pytest.raises(FileNotFoundError) as raised:
        find_data_file("sub/missing.txt")
    message = str(raised.value)
    assert str((empty_data_dir / "data" / "sub" / "missing.txt").resolve()) in message
    assert "KBERT_DATA" in message and "sub/missing.txt" in message


def test_instructions_only_source_is_named_but_not_fetched(empty_data_dir, monkeypatch):
    forbid_network(monkeypatch)
    source = DataSource("https://gluebenchmark.com/tasks", automatic=False)
    with pytest.raises(FileNotFoundError, match="https://gluebenchmark.com/tasks"):
        find_data_file("glue/MRPC/dev.tsv", source)


def test_failed_download_names_source_and_leaves_nothing(empty_data_dir, monkeypatch):
    def unreachable(url, out_file):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(paths, "fetch_url", unreachable)
    source = DataSource("https://example.invalid/data.zip", "data.txt")
    with pytest.raises(FileNotFoundError) as raised:
        find_data_file("data.txt", source)
    message = str(raised.value)
    assert "https://example.invalid/data.zip" in message
    assert "KBERT_DATA" in message and "no network" in message
    assert files_under(empty_data_dir / "cache") == []


def test_download_interrupted_midway_leaves_no_partial_file(empty_data_dir, monkeypatch):
    def interrupted(url, out_file):
        out_file.write(b"half of a file")
        raise ConnectionResetError("connection reset")

    monkeypatch.setattr(paths, "fetch_url", interrupted)
    with pytest.raises(FileNotFoundError, match="connection reset"):
        find_data_file("data.txt", DataSource("https://example.invalid/data.txt"))
    assert files_under(empty_data_dir / "cache") == []


def test_download_extracts_zip_member_into_cache_once(empty_data_dir, monkeypatch):
    archive = zip_bytes({"TASK/dev.tsv": "a\tb\n", "TASK/train.tsv": "other"})
    requested = serve(monkeypatch, archive)
    source = DataSource("https://example.invalid/TASK.zip", "TASK/dev.tsv")

    path = find_data_file("glue/TASK/dev.tsv", source)

    assert path == empty_data_dir / "cache" / "glue" / "TASK" / "dev.tsv"
    assert path.read_text() == "a\tb\n"
    assert files_under(empty_data_dir / "cache") == ["glue/TASK/dev.tsv"]
    assert find_data_file("glue/TASK/dev.tsv", source) == path
    assert requested == ["https://example.invalid/TASK.zip"]


def test_plain_file_download(empty_data_dir, monkeypatch):
    serve(monkeypatch, b"plain bytes")
    path = find_data_file("x/file.bin", DataSource("https://example.invalid/file.bin"))
    assert path.read_bytes() == b"plain bytes"


@pytest.mark.parametrize(
    "content, error",
    [(b"not a zip", "zip"), (zip_bytes({"other.txt": "x"}), "data.txt")],
    # Stable ids: a zip holds its build time, and test workers must collect the same names.
    ids=["not-a-zip", "member-missing"],
)
def test_bad_archive_leaves_nothing(empty_data_dir, monkeypatch, content, error):
    serve(monkeypatch, content)
    with pytest.raises(FileNotFoundError, match=error):
        find_data_file("data.txt", DataSource("https://example.invalid/a.zip", "data.txt"))
    assert files_under(empty_data_dir / "cache") == []


def test_data_modules_do_not_import_tensorflow():
    import subprocess
    import sys

    # A stand-in `kbert` package keeps whatever kbert/__init__.py imports
    # out of the check: only the data modules are under test.
    code = (
        "import sys, types; kbert = types.ModuleType('kbert'); "
        f"kbert.__path__ = [{str(REPO_ROOT / 'kbert')!r}]; sys.modules['kbert'] = kbert; "
        "import kbert.data; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False False", result.stderr


def test_a_downloaded_file_has_the_mode_the_umask_gives(empty_data_dir, monkeypatch):
    import os
    import stat

    serve(monkeypatch, b"plain bytes")
    mask = os.umask(0o027)
    try:
        path = find_data_file("x/file.bin", DataSource("https://example.invalid/file.bin"))
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not the 0600 of a temporary file
