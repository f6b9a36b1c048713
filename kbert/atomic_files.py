"""Writes files so that a crash leaves either the old file or the new one."""

import json
import math
import os
import shutil
import uuid

# Temporary files start with this, so they are hidden from a plain `ls`, never
# match a checkpoint or backup name, and can be found and removed after a kill.
TEMPORARY_PREFIX = ".tmp-"


def write_atomically(path, write):
    """Calls `write(temporary_path)`, then renames the result to `path`.

    The temporary file lies in the directory of `path` (a rename is atomic only
    within one file system) and keeps its file name ending (Keras checks
    `.keras` and `.weights.h5`). It is flushed to disk before the rename, and
    the rename is flushed after, so a crash or power loss at any moment leaves
    either the previous `path` or the complete new one. If `write` fails, the
    temporary file is removed and the error raised again.

    `write` may also create a directory at the path it is given (an export
    folder, say): its files are flushed too, and it is renamed as a whole.

    Args:
        path: the final path; a local file system path.
        write: a function that writes the whole file (or directory) to the
            path it is given.

    Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "note.txt")
    >>> write_atomically(path, lambda p: open(p, "w").write("done"))
    >>> open(path).read()
    'done'
    """
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex[:8]}-{name}")
    try:
        write(temporary)
        if os.path.isdir(temporary):
            for folder, _, files in os.walk(temporary):
                for file in files:
                    _flush_to_disk(os.path.join(folder, file))
        _flush_to_disk(temporary)
        os.replace(temporary, path)
    except BaseException:
        if os.path.isdir(temporary) and not os.path.islink(temporary):
            shutil.rmtree(temporary)
        elif os.path.lexists(temporary):
            os.remove(temporary)
        raise
    _flush_to_disk(directory)


class SavesAtomically:
    """A `keras.Model` mixin: `save` and `save_weights` to a local file replace the old one atomically.

    Keras writes a `.keras` or `.weights.h5` file in place, so a full disk or
    a kill midway destroys the model saved there before. Here the new file is
    written beside it and renamed over it when complete (`write_atomically`);
    other targets (a remote path, `zipped=False`, sharded weights,
    `overwrite=False` over an existing file) are Keras' own.
    """

    def save(self, filepath, overwrite=True, **kwargs):
        return _save_atomically(super().save, filepath, ".keras", overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True, **kwargs):
        return _save_atomically(super().save_weights, filepath, ".weights.h5", overwrite, **kwargs)


def _save_atomically(save, filepath, ending, overwrite, **kwargs):
    path = os.fspath(filepath)
    if ("://" in path or not path.endswith(ending) or kwargs.get("zipped") is False
            or kwargs.get("max_shard_size") is not None or (not overwrite and os.path.exists(path))):
        return save(filepath, overwrite=overwrite, **kwargs)
    return write_atomically(path, lambda temporary: save(temporary, overwrite=True, **kwargs))


def json_text(value):
    """`value` as strict JSON text, NaN and infinities as null (Python's `json` writes a bare NaN, which JSON readers refuse)."""

    def finite(item):
        if isinstance(item, float) and not math.isfinite(item):
            return None
        if isinstance(item, dict):
            return {key: finite(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [finite(inner) for inner in item]
        return item

    return json.dumps(finite(value), indent=2, allow_nan=False) + "\n"


def write_text(path, text):
    """Writes `text` to `path` (UTF-8), closing the file before returning: a `write` for `write_atomically`."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)


def contains_path(folder, path):
    """Whether `path` is `folder` or lies inside it, links resolved."""
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def remove_temporary_files(directory):
    """Removes temporary files that a killed `write_atomically` left behind."""
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.startswith(TEMPORARY_PREFIX):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                os.remove(path)


def _flush_to_disk(path):
    # A file's bytes, or a directory's new entry, can sit in the page cache for
    # seconds after `close`; a power loss then would lose a "finished" write.
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return  # Directories cannot be opened on Windows; renames are durable there.
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # Some file systems (network mounts) refuse fsync on directories.
    finally:
        os.close(descriptor)
