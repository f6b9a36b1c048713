"""Writes files so that a crash leaves either the old file or the new one."""

import json
import math
import os
import re
import shutil
import socket
import stat
import sys
import time
import uuid

from kbert.io.writer_lock import holds_lock

# Temporary files start with this, so they are hidden from a plain `ls`, never
# match a checkpoint or backup name, and can be found and removed after a kill.
TEMPORARY_PREFIX = ".tmp-"
# The whole temporary name kbert makes: the prefix, 8 hex digits, a dash, the
# writer's process id and host (`<pid>@<host>-`; older kbert versions wrote
# none), then the final name. Cleaning after a kill removes only these,
# never a user's file that merely starts with ".tmp-", and never one whose
# writer still runs.
_TEMPORARY_NAME = re.compile(re.escape(TEMPORARY_PREFIX)
                             + r"[0-9a-f]{8}-(?:(?P<pid>[0-9]+)@(?P<host>[A-Za-z0-9._]+)-)?(?P<name>.+)")
# The most characters of the host name a temporary name carries.
_HOST_CHARS = 32
# A temporary of a writer on another host (a file system shared by machines)
# is taken for a dead writer's after this long without a change.
STALE_AFTER_S = 24 * 3600
# The staging folder of `write_together` is `.tmp-<8 hex>-<writer>-together`; this file
# in it, written once every file of the group is complete, commits the group.
_TOGETHER = "together"
_COMMITTED = "committed.json"


def write_atomically(path, write):
    """Calls `write(temporary_path)`, then renames the result to `path`.

    The temporary file lies in the directory of `path` (a rename is atomic only
    within one file system) and keeps its file name ending (Keras checks
    `.keras` and `.weights.h5`). It is flushed to disk before the rename, and
    the rename is flushed after, so a crash or power loss at any moment leaves
    either the previous `path` or the complete new one. If `write` fails, the
    temporary file is removed (an HDF5 file it left open is closed first)
    and the error raised again; an `OSError` that names no file names `path`.

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
    temporary = _temporary_path(directory, name)
    try:
        write(temporary)
        if os.path.isdir(temporary):
            for folder, _, files in os.walk(temporary):
                for file in files:
                    _flush_to_disk(os.path.join(folder, file))
        _flush_to_disk(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        if isinstance(error, OSError) and error.strerror and not error.filename:
            error.filename = path  # a full disk says where: `path: No space left on device`
        # An HDF5 file that a failed write left open (kbert's own weights are
        # built in memory: `write_weights_file`) would be closed at exit, and
        # fail again there: on a full disk, h5py's tracebacks, then a crash.
        _close_hdf5_files(temporary)
        if os.path.isdir(temporary) and not os.path.islink(temporary):
            shutil.rmtree(temporary)
        elif os.path.lexists(temporary):
            os.remove(temporary)
        raise
    _flush_to_disk(directory)


def _close_hdf5_files(path):
    """Closes the HDF5 files that this process still has open at `path` (or in it), errors ignored."""
    h5py = sys.modules.get("h5py")  # only where something loaded it: then it may hold files open
    if h5py is None:
        return
    try:
        open_files = h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)
    except Exception:  # noqa: BLE001 - an h5py without this API: nothing to close
        return
    for identifier in open_files:
        try:
            name = identifier.name
            name = os.fsdecode(name)
            if not contains_path(path, name):
                continue
            h5py.File(identifier).close()  # its objects, then the file
        except Exception:  # noqa: BLE001 - a full disk fails the close too; the file is closed all the same
            pass


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
        # Built in memory, then written (`write_weights_file`): a full disk is then a plain OSError.
        in_memory = None if kwargs else (lambda path: write_weights_file(self, path))
        return _save_atomically(super().save_weights, filepath, ".weights.h5", overwrite, write=in_memory, **kwargs)


def _save_atomically(save, filepath, ending, overwrite, write=None, **kwargs):
    path = os.fspath(filepath)
    if ("://" in path or not path.endswith(ending) or kwargs.get("zipped") is False
            or kwargs.get("max_shard_size") is not None or (not overwrite and os.path.exists(path))):
        return save(filepath, overwrite=overwrite, **kwargs)
    return write_atomically(path, write or (lambda temporary: save(temporary, overwrite=True, **kwargs)))


def write_weights_file(model, path):
    """Writes `model.save_weights(path)`'s `.weights.h5` file, built in memory and written by Python.

    HDF5 writing straight to a disk that fills up midway cannot be closed
    cleanly: h5py prints tracebacks and the process ends in a segmentation
    fault (h5py/h5py#914), when the file is closed or at exit. Built in
    memory, as Keras builds the weights inside a `.keras` file, the file
    reaches the disk through Python's `write`, so a full disk is an
    `OSError` like any other, and HDF5 holds nothing open. The same bytes
    as `save_weights`: `load_weights` reads them.
    """
    import io

    from keras.src.saving import saving_lib

    if not model.built:  # Keras' words
        raise ValueError("You are saving a model that has not yet been built. Try building the model first by "
                         "calling it on some data or by using `build()`.")
    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    try:
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables=set())
    finally:
        store.close()  # in memory: it cannot fail for want of disk space
    with open(path, "wb") as file:
        file.write(buffer.getbuffer())


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


def left_temporaries(directory, names=None):
    """The temporary files and folders that killed writers left in `directory`: `(path, final name)` pairs.

    Only names kbert makes (`.tmp-`, 8 hex digits, a dash, the writer, the
    final name) count, and with `names`, only those whose final name is one
    of them; only those whose writer no longer runs (`left_by_dead_writer`).
    """
    found = []
    if not os.path.isdir(directory):
        return found
    for name in sorted(os.listdir(directory)):
        match = _TEMPORARY_NAME.fullmatch(name)
        if match and (names is None or match["name"] in names) and left_by_dead_writer(directory, name):
            found.append((os.path.join(directory, name), match["name"]))
    return found


def left_by_dead_writer(directory, name):
    """Whether the temporary `name` in `directory` was left by a writer that no longer runs.

    So it is when this process holds the lock of `directory`, or of the
    output the temporary is named for (`kbert.io.writer_lock`): no other
    writer is there. Otherwise the writer named in it is asked: a name
    without one is an older kbert's, whose writer is long gone; a process of
    this host, when it no longer runs or is this very process (whose own
    writes clean up after themselves: one with its process id was left by
    an earlier process of that id, a container's, say). A writer on another
    host cannot be asked: its temporary is left for `STALE_AFTER_S`.
    """
    match = _TEMPORARY_NAME.fullmatch(name)
    if not match:
        return False
    if holds_lock(directory) or holds_lock(os.path.join(directory, match["name"])):
        return True
    if match["pid"] is None:
        return True
    pid = int(match["pid"])
    if match["host"] == _host():
        return pid == os.getpid() or not process_is_running(pid)
    try:
        return time.time() - os.lstat(os.path.join(directory, name)).st_mtime > STALE_AFTER_S
    except FileNotFoundError:  # its writer has just renamed or removed it
        return False


def remove_temporary_files(directory, names=None):
    """Removes the temporary files that a killed `write_atomically` left in `directory`; their paths.

    Only names kbert makes (`.tmp-`, 8 hex digits, a dash, the writer, the
    final name) are removed, and with `names`, only those whose final name
    is one of them; never a file whose writer still runs
    (`left_by_dead_writer`).
    """
    removed = []
    for path, _ in left_temporaries(directory, names):
        if os.path.isfile(path) and not os.path.islink(path):
            try:
                os.remove(path)
            except FileNotFoundError:
                continue  # another worker of the same run removed it
            removed.append(path)
    return removed


def write_together(directory, write, last, optional=()):
    """Writes a group of files into `directory`: where the file `last` is, the others beside it are of its group.

    `write(staging)` writes the group's files into a new staging folder
    inside `directory` (so that renames out of it are atomic). When it
    returns, the files are flushed to disk and a marker written beside them
    commits the group; then the old `last` is removed, the other files are
    renamed into `directory`, and `last` is renamed in at the end. So `last`
    is the group's completion marker:

    - killed before the commit (in `write`, say), `directory` keeps its old
      group untouched, and the staging folder is left for
      `finish_interrupted_writes` to remove;
    - killed after it, `directory` may lack `last` for a moment, never pair
      an old `last` with new files; `finish_interrupted_writes` completes
      the renames.

    If `write` fails, the staging folder is removed and the error raised
    again. New files and folders get the modes the umask gives (not the
    private modes of `tempfile`).

    Args:
        directory: the folder the files belong in (made if missing).
        write: a function that writes the group's files, each complete, into
            the folder it is given.
        last: the file name that marks a complete group (`metrics.json` of a
            run folder); `write` must write it.
        optional: names of files that a group may hold or not (a run
            folder's `model.adapter`): one of the old group that the new
            group lacks is removed with the old `last`, so that no file of
            another group stays beside the new one.
    """
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    staging = _temporary_path(directory, _TOGETHER)
    os.mkdir(staging)
    try:
        write(staging)
        names = os.listdir(staging)
        if last not in names:
            raise ValueError(f"{directory}: the files written together hold no {last}.")
        for name in names:
            _flush_to_disk(os.path.join(staging, name))
        marker = os.path.join(staging, _COMMITTED)
        absent = sorted(name for name in optional if name not in names)
        write_text(marker, json.dumps({"last": last, "absent": absent}) + "\n")
        _flush_to_disk(marker)
        _flush_to_disk(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(directory, staging)


def finish_interrupted_writes(directory, names=()):
    """Completes or removes what killed writes left in `directory`, and says which.

    - A `write_together` group that was committed is renamed into place (its
      files were complete; only the renames were cut short).
    - A group that was not is removed: its files may be partial, and the
      old group in `directory` stands.
    - A temporary file of a killed `write_atomically` of one of `names` is
      removed.

    Only the temporary names kbert makes are touched, and only those whose
    writer no longer runs (`left_by_dead_writer`).

    Returns:
        `(finished, removed)`: the folders of the groups completed, and the
        paths removed.
    """
    finished, removed = [], []
    for path, _ in left_temporaries(directory, (_TOGETHER,)):
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        if os.path.isfile(os.path.join(path, _COMMITTED)):
            _publish(directory, path)
            finished.append(path)
        else:
            shutil.rmtree(path)
            removed.append(path)
    removed += remove_temporary_files(directory, names)
    return finished, removed


def _publish(directory, staging):
    """Renames a committed group out of `staging` into `directory`, `last` at the end; safe to run again after a kill."""
    with open(os.path.join(staging, _COMMITTED), encoding="utf-8") as file:
        marker = json.load(file)
    last, absent = marker["last"], marker.get("absent", [])
    waiting = sorted(name for name in os.listdir(staging) if name not in (_COMMITTED, last))
    stale = [os.path.join(directory, name) for name in absent if os.path.lexists(os.path.join(directory, name))]
    if waiting or stale:
        # Files of the new group are about to join the old `last`: it goes
        # first, then the old group's files that the new one lacks.
        old_last = os.path.join(directory, last)
        if os.path.lexists(old_last):
            os.remove(old_last)
            _flush_to_disk(directory)
        for path in stale:
            os.remove(path)
        for name in waiting:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
        _flush_to_disk(directory)
    if os.path.lexists(os.path.join(staging, last)):
        os.replace(os.path.join(staging, last), os.path.join(directory, last))
        _flush_to_disk(directory)
    shutil.rmtree(staging)


def ordinary_modes(path):
    """Gives `path`, and everything in it if a folder, the modes a new file or folder gets from the umask.

    `tempfile.mkstemp` and `mkdtemp` make private files (0600) and folders
    (0700) whatever the umask: fine for scratch space, wrong for what is
    then published to the user (and to a server running as another user).
    """
    mask = umask()
    for folder, folders, files in os.walk(path) if os.path.isdir(path) else ():
        for name in folders:
            os.chmod(os.path.join(folder, name), 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~mask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~mask)


def make_folder_beside(path):
    """A new, empty folder next to `path`, named `.tmp-<8 hex>-<pid>@<host>-<name>`, with the umask's modes (not 0700).

    For a folder that is filled and then renamed to `path`; one a killed
    writer left is found by `left_temporaries(dirname, [name])`.
    """
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    while True:
        folder = _temporary_path(directory, name)
        try:
            os.mkdir(folder)
            return folder
        except FileExistsError:
            continue


def umask():
    """The process's umask, left as it is where the system shows it (Linux)."""
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    # Elsewhere the only way to read it is to set it and set it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temporary_path(directory, name):
    return os.path.join(directory, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex[:8]}-{os.getpid()}@{_host()}-{name}")


def _host():
    """This host's name as a temporary name carries it: letters, digits and dots, at most `_HOST_CHARS`."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:_HOST_CHARS] or "host"


def special_file_kind(path):
    """What `path` is when it exists and is neither a regular file nor a folder ("a named pipe (FIFO)", ...), links followed; else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing, or a link to nothing: nothing there to replace
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def process_is_running(pid):
    """Whether process `pid` of this host runs (on Windows, where it cannot be asked harmlessly: yes)."""
    if os.name == "nt":  # there os.kill ends the process
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        return True
    except OverflowError:
        return False
    return True


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
