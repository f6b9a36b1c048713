"""`kbert`'s parser and `main`: a command's checks, backend, warnings and errors, around its run.

The commands themselves are declared in their families' modules
(`getting_started`, `pretraining`, `tasks`, `compression`, `serving`), each
with its arguments, checks, output folders and run (`arguments.add_command`).
"""

import argparse
import os
import re
import sys

from kbert.cli import compression, getting_started, pretraining, serving, tasks
from kbert.cli.arguments import HelpFormatter, said_as_flags

# The families in the order `kbert --help` lists their commands.
FAMILIES = (getting_started, pretraining, tasks, compression, serving)
# The kbert package: warnings from its files are shown in one line.
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_parser():
    """The `kbert` argument parser. It imports nothing heavy: `kbert --help` is instant."""
    parser = argparse.ArgumentParser(
        prog="kbert", description="BERT for Keras: train, evaluate, serve.",
        epilog="`kbert COMMAND --help` shows a command's options.", formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.add_commands(commands)
    return parser


def main(argv=None):
    from kbert.runs.outputs import remove_empty_folders

    args = build_parser().parse_args(argv)
    args.command_line = "kbert " + _joined(sys.argv[1:] if argv is None else argv)
    new_folders = [_first_missing(path) for path in _output_folders(args) if not os.path.exists(path)]
    status = 1
    try:
        status = _run(args)
    finally:
        if status != 0:
            for path in new_folders:
                remove_empty_folders(path)  # made for this command, which failed before writing into it
    return status


def _run(args):
    """Runs the parsed command: 0 when done; a user's error or Ctrl-C ends in one line on stderr."""
    try:
        _check_arguments(args)
        with _output_lock(args) as locked:
            if locked:  # again: a writer that held the output until now may have changed it
                _check_arguments(args)
            _use_backend(args)
            _show_kbert_warnings_in_one_line(args.command)
            if args.command != "presets":
                from kbert.backend.tensorflow_support import import_tensorflow_quietly

                import_tensorflow_quietly()
            with _strategy_scope(args):
                args.run(args)
        return 0
    except KeyboardInterrupt:
        print(f"kbert {args.command}: interrupted{args.interrupted}", file=sys.stderr)
        return 130
    except Exception as error:
        if not _is_user_error(error):
            raise
        print(f"kbert {args.command}: error: {one_line(error)}", file=sys.stderr)
        return 2


def _check_arguments(args):
    """Checks a command's files and folders before any work, and before any folder is made."""
    from kbert.runs.outputs import check_input_file

    vocabulary = getattr(args, "vocabulary", None)
    if isinstance(vocabulary, str):  # every command's --vocabulary names a file it reads
        check_input_file(vocabulary, "--vocabulary")
    if args.check is not None:
        args.check(args)


def _output_lock(args):
    """The lock of the output the command writes, held while it runs: the one writer there (`kbert.io.writer_lock`).

    A second command on a locked output is refused, before it cleans or
    reads anything. Under several workers (`--strategy multi-worker`) the
    chief alone holds it: the other workers write nothing there.
    """
    import contextlib

    lock = args.lock(args) if args.lock is not None else None
    if lock is None:
        return contextlib.nullcontext(False)
    from kbert.backend.distribute import chief_by_tf_config

    if getattr(args, "strategy", "absent") != "absent" and not chief_by_tf_config(args.strategy):
        return contextlib.nullcontext(False)
    from kbert.io.writer_lock import hold_lock

    output, beside = lock

    @contextlib.contextmanager
    def held():
        with hold_lock(output, beside=beside, command=args.command_line):
            yield True

    return held()


def _joined(arguments):
    import shlex

    return shlex.join(str(argument) for argument in arguments)


def _use_backend(args):
    """Sets the Keras backend the command asked for, before Keras loads.

    A command that declares its backend (`export` and `predict` write and
    run TensorFlow SavedModels) runs on it whatever the environment names.
    """
    from kbert.backend.selection import use_backend

    backend = args.forced_backend or getattr(args, "backend", None)
    if backend is not None:
        use_backend(backend, asked_by="--backend")


def _strategy_scope(args):
    """The scope of the `--strategy` a command was given; no scope for the others."""
    import contextlib

    if getattr(args, "strategy", "absent") == "absent":
        return contextlib.nullcontext()
    from kbert.backend.distribute import make_strategy

    return make_strategy(args.strategy, connect_timeout=args.connect_timeout).scope()


def _show_kbert_warnings_in_one_line(command):
    """kbert's own warnings as `kbert COMMAND: warning: ...`, not Python's two lines with a source path."""
    import warnings

    python_format = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not os.path.abspath(filename).startswith(PACKAGE + os.sep):
            return python_format(message, category, filename, lineno, file, line)
        text = said_as_flags(one_line(message))
        print(f"kbert {command}: warning: {text}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show


def _is_user_error(error):
    """Whether `error` is what a user's input or machine causes (a bad value, file, disk), not a bug in kbert."""
    import zipfile

    if isinstance(error, (ValueError, TypeError, OSError, TimeoutError, zipfile.BadZipFile)):
        return True
    tensorflow = sys.modules.get("tensorflow")  # its errors only where it was loaded
    errors = getattr(tensorflow, "errors", None)
    return errors is not None and isinstance(error, errors.OpError)


# The most characters of an error's one line.
MAX_LINE = 1000


def one_line(error):
    """An error (or warning) as the one line a command prints: an OS error as `file: reason`, a setting as its flag.

    An error that names settings in backticks (`batch_size`: a
    `SettingError`, a `DataFormatError`) says them as the command's flags
    (--batch-size).
    """
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename and error.strerror:
        message = f"{error.filename}: {error.strerror}"
    if hasattr(error, "said_as_flags"):
        message = error.said_as_flags()
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(message).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 1 and lines[0].startswith("Exception encountered when calling"):
        lines = lines[1:]  # Keras' wrapping of a layer's error: the error is the next line
    line = lines[0] if lines else type(error).__name__
    # A message that quotes a whole config or input is cut: the line names the problem first.
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."


def _first_missing(path):
    """The highest folder of `path` that does not exist yet: what making `path` would make."""
    path = os.path.abspath(path)
    while not os.path.exists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


def _output_folders(args):
    """The folders a command writes into, made by it when missing: its declared ones, or `--out`."""
    out = getattr(args, "out", None)
    if not out:
        return []
    return args.output_folders(args) if args.output_folders is not None else [out]
