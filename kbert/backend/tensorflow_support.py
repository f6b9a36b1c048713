"""TensorFlow where kbert needs it, and one clear error where it is not installed.

kbert's models (encoders, task models, the pretrainer, the distillers) are
Keras 3 code: they build, train on token ids, save and load on JAX or PyTorch
without TensorFlow. TensorFlow is what kbert's text side is made of: the
TF-Text tokenizers and preprocessors, the `tf.data` pipelines that feed raw
text to `fit`, SavedModel export and TensorBoard event files. Those parts
import it; where it is not installed, asking for them raises
`TensorFlowMissingError`, which says what needs it and how to get it.
"""

import functools
import os
import re
import sys
import tempfile

INSTALL = "pip install tensorflow tensorflow-text"


class TensorFlowMissingError(ImportError):
    """A part of kbert that runs on TensorFlow was asked for where TensorFlow is not installed."""


def missing_message(feature):
    return (
        f"{feature} needs TensorFlow and TensorFlow Text, which are not installed ({INSTALL}). "
        "Without them kbert's models build, train on token ids (dicts of token_ids, segment_ids "
        "and padding_mask) and save and load on the jax and torch backends."
    )


@functools.cache
def tensorflow_installed():
    """Whether TensorFlow imports here (it is imported to find out, its load lines as `TF_CPP_MIN_LOG_LEVEL` says)."""
    if "tensorflow" not in sys.modules:
        _import_tensorflow_filtering(_as_log_level_says)
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


# What TensorFlow's C++ side writes to stderr while it loads, before its log
# level applies (absl's logging is not initialized yet, so the lines come
# whatever TF_CPP_MIN_LOG_LEVEL says): info lines such as "oneDNN custom
# operations are on" and "Could not find cuda drivers", and absl's banner that
# says so. Nothing in them asks a user to act; warnings and errors pass.
_LOAD_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    r"|I\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
)


def is_load_noise(line):
    """Whether `line` is one of the info lines TensorFlow's C++ side prints while it loads (nothing to act on)."""
    return _LOAD_NOISE.match(line.rstrip("\n")) is not None


# A line of TensorFlow's C++ log: its severity (Info, Warning, Error, Fatal),
# then date, time and thread, then where it was written and what it says.
_LOG_LINE = re.compile(r"(?P<severity>[IWEF])\d{4} [\d:.]+ +\d+ (?P<where>[\w.]+:\d+)\] (?P<message>.*)")
_ABSL_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# The severities TF_CPP_MIN_LOG_LEVEL counts: 1 hides info lines, 2 warnings too, 3 errors too.
_SEVERITY_LEVELS = {"I": 0, "W": 1, "E": 2, "F": 3}


def import_tensorflow_quietly():
    """Imports TensorFlow (where installed) without the info lines its C++ side prints while loading.

    Other lines it writes to stderr meanwhile (warnings, errors) are passed
    on. For the `kbert` command: a healthy run prints nothing that reads
    like an alarm. Does nothing where TensorFlow is loaded already.
    """
    _import_tensorflow_filtering(lambda lines: [line for line in lines if not is_load_noise(line)])


def _as_log_level_says(lines):
    """TensorFlow's load lines as its log level would have them, had it applied yet: each once, none below `TF_CPP_MIN_LOG_LEVEL`.

    TensorFlow's two libraries each print the same lines while they load
    (so `import tensorflow` shows each twice), before its log level applies.
    Here a line that the level hides is left out (a fatal one never is), a
    repeated line too, and absl's banner goes with the first line shown.
    Lines that are not TensorFlow's log (Python's warnings) pass as they are.
    """
    try:
        level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        level = 0
    # `banner`: absl's banner came and waits for a line to show; `shown`: the line before was kept.
    kept, seen, banner, banner_shown, shown = [], set(), False, False, True
    for line in lines:
        text = line.rstrip("\n")
        if text == _ABSL_BANNER:
            banner = not banner_shown
            continue
        match = _LOG_LINE.match(text)
        if match is None:
            if is_load_noise(line):  # the second line of an info line ("To enable the following instructions")
                if shown:
                    kept.append(line)
            else:
                kept.append(line)
            continue
        severity = match["severity"]
        key = (severity, match["where"], match["message"])
        shown = (severity == "F" or _SEVERITY_LEVELS[severity] >= level) and key not in seen
        seen.add(key)
        if shown:
            if banner:
                kept.append(_ABSL_BANNER + "\n")
                banner, banner_shown = False, True
            kept.append(line)
    return kept


def _import_tensorflow_filtering(keep):
    """Imports TensorFlow with its stderr captured (its C++ side writes to the descriptor), then writes the lines `keep(lines)` returns.

    Does nothing where TensorFlow is loaded already; an ImportError (no
    TensorFlow here) is left for the caller to find.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    try:
        saved_stderr = os.dup(2)
    except OSError:  # no standard error to capture
        saved_stderr = None
    if saved_stderr is None:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass  # a jax or torch install without TensorFlow: `tensorflow_installed` says so
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            for line in keep(captured.read().decode("utf-8", "replace").splitlines(keepends=True)):
                sys.stderr.write(line)
            sys.stderr.flush()


def require_tensorflow(feature):
    """The `tensorflow` module, or `TensorFlowMissingError` naming `feature` ("Raw-text fit", ...)."""
    if not tensorflow_installed():
        raise TensorFlowMissingError(missing_message(feature))
    import tensorflow

    return tensorflow


def is_tf_dataset(value):
    """Whether `value` is a `tf.data.Dataset` (False, without importing TensorFlow, where it is not loaded)."""
    tensorflow = sys.modules.get("tensorflow")
    return tensorflow is not None and isinstance(value, tensorflow.data.Dataset)
