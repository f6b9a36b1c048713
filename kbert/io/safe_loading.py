"""Checks a `.keras` file before Keras reads it: a whole zip archive, with members of sane sizes."""

import os
import zipfile

_MB = 1 << 20
# The most each member of a `.keras` may hold, uncompressed. Keras reads
# `config.json` and `metadata.json` whole into memory (and parses them),
# extracts `assets/` to disk, and reads the weights from the archive.
# A kbert config holds the vocabulary: BERT's 30,522 WordPieces make a
# 333 KB config.json, a 250,000-piece SentencePiece model (base64) about
# 7 MB. BERT-large's weights with an Adam optimizer's are about 4 GB.
LIMITS = {
    "config.json": 64 * _MB,
    "metadata.json": 1 * _MB,
    "assets/": 256 * _MB,  # each file under assets/
    "model.weights.h5": 32 * 1024 * _MB,
    "model.weights.npz": 32 * 1024 * _MB,
    "": 64 * _MB,  # any other member
}
_WHAT = {"assets/": "an asset", "": "a member Keras does not write"}


def check_keras_file(path, limits=None):
    """Raises unless `path` is a whole `.keras` archive whose members are no bigger than `limits`.

    Sizes are the uncompressed sizes the archive declares, checked before
    anything is read: a few MB of compressed whitespace can declare a
    config.json of gigabytes, which Keras would read into memory. Python's
    zipfile reads no more than a member declares, so the declared size
    bounds what is read.

    Args:
        path: the `.keras` file.
        limits: `{member name: most bytes}`, as `LIMITS` (its default);
            "assets/" is for each file under assets/, "" for any other
            member.

    Raises:
        FileNotFoundError, IsADirectoryError: no file at `path`.
        ValueError: not a whole zip archive, a member missing, or a member
            over its limit (naming the file, the member and both sizes).
    """
    limits = {**LIMITS, **(limits or {})}
    path = os.fspath(path)
    if "://" in path:
        return  # Keras reads remote files itself
    if not os.path.exists(path):
        raise FileNotFoundError(f"No model file at {path}.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; give the model's .keras file.")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a valid .keras file (not a whole zip archive: truncated or corrupt).")
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    names = {member.filename for member in members}
    missing = sorted({"config.json", "metadata.json"} - names)
    if missing:
        raise ValueError(f"{path} is not a valid .keras file (it lacks {', '.join(missing)}).")
    for member in members:
        kind = _kind(member.filename, limits)
        if member.file_size > limits[kind]:
            raise ValueError(
                f"{path}: its member {member.filename} is {member.file_size:,} bytes uncompressed, over the "
                f"{limits[kind]:,} bytes kbert reads for {_WHAT.get(kind, kind)}; refused before reading it."
            )


def _kind(name, limits):
    if name in limits and name not in ("assets/", ""):
        return name
    return "assets/" if name.startswith("assets/") else ""
