"""Where data files live and how they are fetched."""

import dataclasses
import os
import tempfile
import zipfile
from pathlib import Path

from kbert.io.atomic_files import ordinary_modes
from kbert.io.text_files import DataFormatError  # noqa: F401 (kbert.data's error type)

DATA_ENV = "KBERT_DATA"
CACHE_ENV = "KBERT_CACHE"
DOWNLOAD_TIMEOUT_SECONDS = 10

_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class DataSource:
    """The public origin of a data file.

    Args:
        url: address of the file, or of a zip archive that holds it.
        zip_member: the file's path inside the archive, if `url` is a zip.
        automatic: False when `url` is a page with instructions rather than a
            file that can be downloaded.
    """

    url: str
    zip_member: str | None = None
    automatic: bool = True


def data_dir():
    """Returns the folder that holds the data sets.

    That is `$KBERT_DATA` if set, else `shared/data` next to the repository.

    Example:
    >>> (data_dir() / "sms_spam_collection").is_dir()
    True
    """
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser().resolve()
    return (_REPO_ROOT.parent / "shared" / "data").resolve()


def cache_dir():
    """Returns the folder for downloaded files: `$KBERT_CACHE` or `~/.cache/kbert/data`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    return Path.home() / ".cache" / "kbert" / "data"


def find_data_file(relative_path, download=None):
    """Returns the absolute path of a data file, downloading it if needed.

    The file is looked up in `data_dir()`, then in `cache_dir()`. If it is in
    neither and `download` (a `DataSource`) allows it, the public copy is
    fetched into `cache_dir()`.

    Example:
    >>> path = find_data_file("glue/SST-2/dev.tsv")
    >>> path.name
    'dev.tsv'

    Raises:
        FileNotFoundError: the file is missing and could not be downloaded.
            The message says where to put it and where to get it.
    """
    expected = data_dir() / relative_path
    if expected.is_file():
        return expected
    cached = cache_dir() / relative_path
    if cached.is_file():
        return cached

    message = (
        f"Data file not found: {expected}\n"
        f"Place the file there, or set the {DATA_ENV} environment variable "
        f"to a folder that contains {relative_path}."
    )
    if download is None:
        raise FileNotFoundError(message)
    if not download.automatic:
        raise FileNotFoundError(f"{message}\nGet it as described at {download.url}")
    try:
        _download(download, cached)
    except (OSError, zipfile.BadZipFile, KeyError) as error:
        raise FileNotFoundError(
            f"{message}\nPublic source: {download.url} (download failed: {error})"
        ) from error
    return cached


def fetch_url(url, out_file):
    """Writes the bytes at `url` into the binary file object `out_file`."""
    import urllib.request  # Imported here: it is slow to import and rarely needed.

    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
        while chunk := response.read(1 << 20):
            out_file.write(chunk)


def _download(source, target):
    """Fetches `source` into `target`; a failure leaves no file behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # Temporary files sit next to the target so that `os.replace` is atomic.
    temporary_paths = []

    def new_temporary_file():
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        temporary_paths.append(name)
        return os.fdopen(handle, "wb")

    try:
        with new_temporary_file() as downloaded:
            fetch_url(source.url, downloaded)
        result = temporary_paths[-1]
        if source.zip_member is not None:
            with zipfile.ZipFile(result) as archive, new_temporary_file() as extracted:
                with archive.open(source.zip_member) as member:
                    while chunk := member.read(1 << 20):
                        extracted.write(chunk)
            result = temporary_paths[-1]
        ordinary_modes(result)  # `mkstemp` made it 0600: private to this user
        os.replace(result, target)
    finally:
        for name in temporary_paths:
            if os.path.exists(name):
                os.remove(name)
