"""Bounds the time and memory an untrusted SavedModel may take: the process ends, with one line, past either."""

import os
import sys
import threading
import time


class RunLimits:
    """A watchdog that ends the process when a step runs too long or the process holds too much memory.

    kbert's op check (`kbert.serving.check_safe_to_load`) keeps an untrusted
    SavedModel away from files, the network and other processes, but not
    from the CPU and memory: a `While` loop on a condition that stays true,
    or a tensor the size of a request multiplied many times over, is made
    of safe ops. Python cannot interrupt TensorFlow while it runs a graph,
    so a thread watches from beside it: each step (loading, then each batch
    of requests) has `seconds` from its `restart()`, and the process's
    resident memory may not pass `memory_bytes`. Past either, it writes
    `message` with the limit that was passed to standard error and ends the
    process at once with `exit_status` (no `finally` block runs: the
    process's own state is what cannot be trusted).

    Use it in a process of its own, such as a command; a library caller
    that wants these bounds runs the model in a child process.

    Args:
        seconds: the time each step may take.
        memory_bytes: the most resident memory the process may hold.
        message: a function of the limit that was passed (`"time"` or
            `"memory"`) that returns the line to write.
        exit_status: the process's exit status then.
        poll_seconds: how often the thread looks.

    Example:
    >>> limits = RunLimits(seconds=60, memory_bytes=64 * 2**30, message=lambda what: f"past the {what} limit")
    >>> with limits:
    ...     limits.restart()  # before each step
    ...     total = sum(range(1000))
    >>> total
    499500
    """

    def __init__(self, seconds, memory_bytes, message, exit_status=2, poll_seconds=0.05):
        if not seconds > 0 or not memory_bytes > 0:
            raise ValueError(f"RunLimits needs a positive time and memory; got {seconds} s, {memory_bytes} bytes.")
        self.seconds = seconds
        self.memory_bytes = memory_bytes
        self.message = message
        self.exit_status = exit_status
        self.poll_seconds = poll_seconds
        self._deadline = None
        self._stopped = threading.Event()
        self._thread = None

    def restart(self):
        """Starts a step: it has `seconds` from now."""
        self._deadline = time.monotonic() + self.seconds

    def __enter__(self):
        self.restart()
        self._stopped.clear()
        self._thread = threading.Thread(target=self._watch, name="kbert-run-limits", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exception):
        self._stopped.set()
        self._thread.join()
        return False

    def _watch(self):
        while not self._stopped.wait(self.poll_seconds):
            if time.monotonic() > self._deadline:
                self._end("time")
            if resident_bytes() > self.memory_bytes:
                self._end("memory")

    def _end(self, limit):
        sys.stderr.write(self.message(limit).rstrip("\n") + "\n")
        sys.stderr.flush()
        os._exit(self.exit_status)


def resident_bytes():
    """The memory this process holds now (its resident set), in bytes; its peak where Linux's /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
