"""One writer per output: a lock that a `kbert` command holds on its run folder for as long as it runs.

Two commands writing one run folder destroy each other's work: the later
one takes the earlier one's files for the leftovers of a killed run and
removes them, or replaces its run without `--overwrite`. So a command that
writes a folder (or a file, or a folder that it replaces by a rename) holds
its lock for the whole command, and a second command on the same output is
refused, in one line that names the process holding it (`OutputInUseError`).

The lock is an advisory `flock` on a small file that kbert owns:
`<folder>/.kbert-lock` inside a run folder, or `.kbert-lock-<name>` beside
an output that is replaced as a whole (a prepared corpus, a metrics file).
The file holds the holder's process id, host and command line, for the
message. The operating system frees the lock when its process ends in any
way, SIGKILL included, so a lock never outlives its writer: a file left by
a killed writer is taken over by the next command. The file is removed
when the lock is released.

While a process holds the lock of an output, whatever kbert's temporary
names left in it (or beside it, named for it) is known to be a dead writer's
(`holds_lock`), and is cleaned (`kbert.io.atomic_files`).

Where the file system cannot lock (some network mounts) or the platform has
no `flock` (Windows), the command runs unlocked, as before, with a warning
in the first case.
"""

import contextlib
import json
import os
import shlex
import socket
import sys
import time
import warnings

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

# The lock file inside a run folder, and the prefix of the one beside an output.
LOCK_FILE = ".kbert-lock"
# How long a refused command waits for the holder's details to appear in the
# file (the holder writes them right after it takes the lock).
_READ_HOLDER_S = 1.0
# The longest command line a lock file keeps.
_COMMAND_CHARS = 300

# The outputs this process holds the lock of (real paths), with the lock file of each.
_held = {}


class OutputInUseError(OSError):
    """Another process holds the lock of the output: it is writing there now."""


def lock_file(output, beside=False):
    """The lock file of `output`: `output/.kbert-lock`, or `.kbert-lock-<name>` beside it."""
    if not beside:
        return os.path.join(output, LOCK_FILE)
    directory, name = os.path.split(os.path.abspath(output))
    return os.path.join(directory, f"{LOCK_FILE}-{name}")


@contextlib.contextmanager
def hold_lock(output, beside=False, flag="--out", command=None):
    """Holds the lock of `output` for the block; raises `OutputInUseError` when another process holds it.

    The folder of the lock file is made if missing (`output` itself, or
    the folder of `output` when `beside`). Where the lock cannot be taken
    for another reason than its holder (`output` is a file, or lies in a
    folder that cannot be written, or on a file system without locks), the
    block runs unlocked: the command's own checks of `output` say what is
    wrong with it.

    Args:
        output: the run folder, or the output file or folder (`beside`).
        beside: the lock file lies beside `output`, not inside it: for an
            output that is written aside and renamed into place as a whole.
        flag: the command's flag of `output`, for the refusal's advice.
        command: the command line recorded for a refused command to show
            (default: this process' own).

    Example:
    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> with hold_lock(run):
    ...     try:
    ...         with hold_lock(run):
    ...             pass
    ...     except OutputInUseError as error:
    ...         print("refused:", "in use by" in str(error))
    refused: True
    """
    held = _acquire(output, beside, flag, command)
    try:
        yield
    finally:
        if held is not None:
            _release(held)


def holds_lock(path):
    """Whether this process holds the lock of `path` or of a folder that holds it."""
    path = os.path.realpath(path)
    return any(path == output or path.startswith(output.rstrip(os.sep) + os.sep) for output in _held)


def holder(output, beside=False):
    """What the lock file of `output` says of its holder (`pid`, `host`, `command`, `started`), or None.

    The file may be a dead writer's: only a refused `hold_lock` tells that
    the holder runs.
    """
    try:
        with open(lock_file(output, beside), encoding="utf-8") as file:
            found = json.loads(file.read())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


class _Held:
    def __init__(self, output, path, descriptor):
        self.output, self.path, self.descriptor = output, path, descriptor


def _acquire(output, beside, flag, command):
    if fcntl is None:
        return None
    path = lock_file(output, beside)
    if os.path.lexists(output) and not os.path.isdir(output) and not beside:
        return None  # a file where a folder should be: the command says so
    while True:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError:
            return None  # not writable, or not a folder: the command's own checks say so
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise OutputInUseError(_refusal(output, beside, flag)) from None
        except OSError as error:  # ENOLCK, EOPNOTSUPP: the file system does not lock
            os.close(descriptor)
            warnings.warn(f"{output} cannot be locked ({error.strerror or error}), so another kbert command "
                          "writing there at the same time would not be refused.", RuntimeWarning, stacklevel=4)
            return None
        # The holder before us may have removed the file between our `open`
        # and our `flock`: then we locked a file that no other process finds.
        try:
            same = os.path.samestat(os.fstat(descriptor), os.stat(path))
        except OSError:
            same = False
        if same:
            break
        os.close(descriptor)
    details = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command_line(command),
               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(descriptor, 0)
    os.write(descriptor, (json.dumps(details) + "\n").encode("utf-8"))
    held = _Held(os.path.realpath(output), path, descriptor)
    _held[held.output] = held
    return held


def _release(held):
    _held.pop(held.output, None)
    try:
        # Removed while still locked: a command that opened it meanwhile
        # finds, once it has the lock, that the file is gone, and starts over.
        if os.path.samestat(os.fstat(held.descriptor), os.stat(held.path)):
            os.remove(held.path)
    except OSError:
        pass
    os.close(held.descriptor)


def _refusal(output, beside, flag):
    found = None
    deadline = time.monotonic() + _READ_HOLDER_S
    while found is None:
        found = holder(output, beside)
        if found is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the holder is writing its details right now
    if found is None or not isinstance(found.get("pid"), int):
        who = "another process"
    else:
        who = f"process {found['pid']}"
        if found.get("host") and found["host"] != socket.gethostname():
            who += f" on {found['host']}"
        if found.get("command"):
            who += f" ({found['command']})"
        if found.get("started"):
            who += f", started {found['started']}"
    return (f"{output} is in use by another kbert command: {who}. Wait for it to end, or choose another "
            f"{flag}.")


def _command_line(command):
    if command is None:
        command = shlex.join([os.path.basename(sys.argv[0] or "python")] + sys.argv[1:])
    command = " ".join(str(command).split())  # one line
    return command if len(command) <= _COMMAND_CHARS else command[:_COMMAND_CHARS - 3] + "..."
