"""A function run in a Python process of its own on Keras' TensorFlow backend, which dies with its caller.

A program on JAX or PyTorch cannot write a SavedModel: the export (and only
it) runs in such a process (`kbert.serving.exporter`). Arguments and the
answer travel as JSON; the user's errors come back as they are, in one line.
"""

import json
import os
import subprocess
import sys

from kbert.backend.tensorflow_support import is_load_noise

# The errors that come back as they are, by name: the user's errors, which
# kbert's CLI shows as one line.
USER_ERRORS = {
    error.__name__: error
    for error in (ValueError, TypeError, OSError, FileExistsError, FileNotFoundError, IsADirectoryError,
                  NotADirectoryError, PermissionError, TimeoutError)
}

# The start of the process, before its slow imports: on Linux the kernel
# kills it as soon as its caller dies (prctl PR_SET_PDEATHSIG), and a caller
# that died before that (its process id is the second argument) ends it at
# once. Standard library only, so that it runs in milliseconds.
DIE_WITH_CALLER = """
import ctypes, os, signal, sys
caller = int(sys.argv[2])
if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
if os.getppid() != caller:
    sys.exit(1)
"""
ANSWER = DIE_WITH_CALLER + "from kbert.backend.tensorflow_process import answer\nanswer(sys.argv[3], sys.argv[1], caller)\n"

# In the process `call_in_tensorflow` starts: the process id of its caller.
_caller = None


def call_in_tensorflow(function, argument, what):
    """`function(argument)` in a new Python process on TensorFlow's backend: what it returns.

    Args:
        function: "module:name" of a function of one JSON value that
            returns one.
        argument: its argument, JSON.
        what: what the process does, for errors ("exporting the model").

    Raises:
        The function's error, where it is one of `USER_ERRORS`; else
        ChildProcessError with its first line, or how the process ended
        (crashed, killed, out of memory).
    """
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    result = subprocess.run(
        [sys.executable, "-c", ANSWER, json.dumps(argument), str(os.getpid()), function],
        env=environment, capture_output=True, text=True,
    )
    lines = result.stdout.strip().splitlines()
    reply = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if "result" in reply:
        return reply["result"]
    if "error" in reply and reply["error"] in USER_ERRORS:
        raise USER_ERRORS[reply["error"]](reply["message"])
    if "error" in reply:  # a TensorFlow error (a full disk), or a fault of kbert's
        raise ChildProcessError(f"The TensorFlow process {what} failed: {reply['error']}: {reply['message']}")
    # No answer: the process crashed or was killed (out of memory); its last
    # line says how, unless it is TensorFlow's loading chatter.
    said = [line.strip() for line in result.stderr.splitlines() if line.strip() and not is_load_noise(line)]
    last = said[-1:]
    raise ChildProcessError(f"The TensorFlow process {what} ended with exit status "
                            f"{result.returncode}{': ' + last[0] if last else ''}")


def answer(function, argument, caller):
    """In the process: prints `function(argument)` as JSON, `{"result": ...}` or `{"error": name, "message": line}`.

    `caller` is the process id of the process that started this one
    (`caller_has_ended`). An error is printed as its type's name and its
    message's first line.
    """
    global _caller

    import importlib

    module, name = function.split(":")
    _caller = caller
    try:
        print(json.dumps({"result": getattr(importlib.import_module(module), name)(json.loads(argument))}))
    except Exception as error:
        message = getattr(error, "message", None) or str(error) or type(error).__name__  # TensorFlow's own
        lines = [line.strip() for line in str(message).splitlines() if line.strip()]
        print(json.dumps({"error": type(error).__name__, "message": lines[0] if lines else type(error).__name__}))
    finally:
        _caller = None


def caller_has_ended():
    """In a process `call_in_tensorflow` started: whether its caller has died (its work is then for no one)."""
    return _caller is not None and os.getppid() != _caller
