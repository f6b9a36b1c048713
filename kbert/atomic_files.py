"""Writes files so that a crash leaves either the old file or the new one."""

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
