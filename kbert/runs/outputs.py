"""Where the `kbert` commands write, checked before any work: nothing replaced by surprise, nothing lost.

The rules the commands follow (docs/cli.rst, "What a command may replace"):

- an output that exists is replaced only with `--overwrite`, and only when it
  is of the kind the command writes (`check_output_file`, the run folders
  of `start_run_folder`, a prepared corpus, an exported version);
- what is replaced is written aside and renamed into place
  (`kbert.io.atomic_files`), and a run folder's older TensorBoard logs are moved
  aside, never deleted;
- a run folder's model and metrics are written together (`write_run`): its
  `metrics.json` is the mark of a finished run, and where it is, the
  `model.keras` beside it is of the same run; what a killed run left is
  cleaned by the next run of the folder (`start_run_folder`);
- an output never is, holds or lies in one of the command's own inputs;
- a folder a failed command made and left empty is removed
  (`remove_empty_folders`).
"""

import os
import sys
import time

from kbert.io.atomic_files import contains_path, finish_interrupted_writes, special_file_kind, write_together

# The files of a `kbert train`, `distill` or `prune` run folder; the last,
# written last, marks a finished run (as in run folders of every kbert version).
RUN_FILES = ("model.keras", "metrics.json")
RUN_MODEL, RUN_METRICS = RUN_FILES
# A LoRA run's adapters alone (`kbert.models.adapter_file`), beside its model: in the group when there are adapters.
RUN_ADAPTER = "model.adapter"
RUN_LOGS = "tensorboard"
# Where a run folder's earlier TensorBoard logs are moved: `DIR/earlier-runs/<time>/tensorboard`.
EARLIER_RUNS = "earlier-runs"


def check_input_file(path, flag):
    """Raises unless `path` (the value of `flag`) is a file that exists."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{flag} {path}: no such file.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{flag} {path} is a folder; give a file.")


def check_output_file(path, flag, overwrite, inputs=()):
    """Raises unless the file `path` (the value of `flag`) can be written: not a folder, not an input, new or `overwrite`.

    A named pipe, a device, a socket or a symbolic link is refused, with
    or without `overwrite`: kbert writes regular files, and would replace
    it with one (`--out /dev/null`, run as root, would replace the
    system's; a link would be replaced by a file).
    """
    if os.path.isdir(path):
        raise IsADirectoryError(f"{flag} {path} is a folder; give the file to write.")
    check_regular_file(path, flag)
    _check_not_an_input(path, flag, inputs)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{flag} {path} exists; pass --overwrite to replace it.")
    check_writable(path, flag)


def check_regular_file(path, flag):
    """Raises, naming `flag`, when `path` is a named pipe, a device, a socket or a link: kbert replaces none."""
    _refuse_special_file(path, f"{flag} {path}", flag)


def check_own_files(folder, names, flag):
    """Raises, naming `flag`, when a file of `names` in `folder` (what the command writes there) is not kbert's to replace."""
    for name in names:
        _refuse_special_file(os.path.join(folder, name), f"{flag} {folder}: its {name}", flag)


def _refuse_special_file(path, said, flag):
    kind = special_file_kind(path)
    if kind is not None:
        link = " (through a link)" if os.path.islink(path) else ""
        raise ValueError(f"{said} is {kind}{link}, not a regular file; kbert writes only regular files and does "
                         f"not replace it, with or without --overwrite: choose another {flag}.")
    if os.path.islink(path):
        # kbert makes no links: writing would replace the user's link with a
        # file, and writing through it would change a file kbert did not make.
        raise ValueError(f"{said} is a symbolic link (to {os.readlink(path)}), not a file kbert wrote; kbert "
                         f"replaces neither the link nor what it points to: remove it, or choose another {flag}.")


def check_output_folder(path, flag, inputs=()):
    """Raises unless `path` (the value of `flag`) is a folder, or can become one, that holds none of `inputs`."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{flag} {path} is a file, not a folder.")
    _check_not_an_input(path, flag, inputs)
    check_writable(path, flag)


def check_writable(path, flag):
    """Raises when the nearest existing folder at or above `path` cannot be written to."""
    existing = os.path.abspath(path)
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"{flag} {path}: {existing} is not writable.")


def start_run_folder(out, overwrite, inputs=(), flag="--out", report=None):
    """Readies the run folder `out` of `kbert train`, `distill` or `prune`, before any work.

    What a killed run left is cleaned first, and said in one line to
    `report` (default: stderr; `clean_run_folder`). A folder holding a run
    (`metrics.json`, or a `model.keras` of a run that never finished) needs
    `overwrite`, and then must not hold the command's inputs there. The
    TensorBoard logs of an earlier run (finished or interrupted) are moved to
    `out/earlier-runs/<time>/`, so the new run's curves start clean.

    Returns:
        A line saying what was moved aside, or None.
    """
    check_output_folder(out, flag)
    clean_run_folder(out, report)
    present = [name for name in RUN_FILES if os.path.exists(os.path.join(out, name))]
    metrics = RUN_METRICS in present
    if present and not overwrite:
        held = (f"a finished run ({', '.join(present)})" if metrics
                else f"the {RUN_MODEL} of a run that did not finish (no {RUN_METRICS})")
        raise FileExistsError(f"{flag} {out} holds {held}; pass --overwrite to replace it, or choose "
                              f"another {flag}.")
    replaced = [os.path.join(out, name) for name in RUN_FILES + (RUN_ADAPTER, RUN_LOGS)]
    for path in inputs:
        if any(contains_path(target, path) for target in replaced):
            raise ValueError(f"{flag} {out}: this run would replace {path}, one of its own inputs; "
                             f"choose another {flag}.")
    logs = os.path.join(out, RUN_LOGS)
    if not os.path.isdir(logs):
        return None
    stamp = os.path.join(out, EARLIER_RUNS, time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    earlier_run, number = stamp, 1
    while os.path.exists(earlier_run):  # two runs in one second
        number += 1
        earlier_run = f"{stamp}-{number}"
    os.makedirs(earlier_run)
    aside = os.path.join(earlier_run, RUN_LOGS)
    os.rename(logs, aside)
    earlier = "a finished run, replaced" if metrics else "an unfinished run (interrupted?)"
    return (f"{out} held {earlier}: its TensorBoard logs are now in {aside}, and this run starts from "
            "the beginning.")


def clean_run_folder(out, report=None):
    """Completes or removes what a killed run left in the run folder `out`, and says so in one line.

    A run killed before its files were complete left a staging folder (and,
    from kbert versions before this one, temporary `.tmp-*-model.keras`
    files): they are removed, and the folder holds the run before it, if any.
    A run killed while its complete files were being renamed into place is
    completed. Nothing that kbert did not name is touched, nor what a
    writer that still runs is writing: the `kbert` commands clean under
    the folder's lock (`kbert.io.writer_lock`), which tells that no other
    writer is there; without it, the process ids in the names are asked
    (`kbert.io.atomic_files.left_by_dead_writer`).

    Args:
        report: called with the line; default: print it on stderr.

    Returns:
        The line, or None when there was nothing to clean.
    """
    finished, removed = finish_interrupted_writes(out, RUN_FILES)
    if not finished and not removed:
        return None
    if finished:
        line = (f"{out}: an earlier run was interrupted while its files were put in place; it is now "
                "complete")
        if removed:
            line += ", and the partial files of another were removed"
    else:
        line = f"{out}: an earlier run was interrupted before it finished; its partial files were removed"
    line += (f" (the folder holds the run of its {RUN_METRICS})."
             if os.path.exists(os.path.join(out, RUN_METRICS)) else ".")
    (report or _print_to_stderr)(line)
    return line


def write_run(out, write):
    """Writes a run's files into the run folder `out` together: all of them, or none (`kbert.io.atomic_files.write_together`).

    `write(folder)` writes `model.keras` and `metrics.json` into `folder`, a
    staging folder inside `out`, and `model.adapter` for a LoRA model; they
    replace the old ones only once all are complete (an old `model.adapter`
    goes when the new run has none). Killed before that, `out` keeps its
    earlier run whole, and the next `start_run_folder` removes the partial
    files.
    """
    write_together(out, write, last=RUN_METRICS, optional=(RUN_ADAPTER,))


def _print_to_stderr(line):
    print(line, file=sys.stderr, flush=True)


def remove_empty_folders(path):
    """Removes `path` if it holds nothing but empty folders (what a failed command made and left)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return
    for folder, _, files in os.walk(path, topdown=False):
        if files:
            return
        try:
            os.rmdir(folder)
        except OSError:
            return  # not empty after all (a link, a file that appeared)


def _check_not_an_input(path, flag, inputs):
    for given in inputs:
        if given and (contains_path(path, given) or contains_path(given, path)):
            raise ValueError(f"{flag} {path} overlaps {given}, one of the command's own inputs (one is, or "
                             f"holds, the other); choose another {flag}.")
