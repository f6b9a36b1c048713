"""`kbert.export`: a task model as a versioned SavedModel that TF Serving serves on raw text."""

import ctypes
import errno
import functools
import os
import re
import shutil
import socket
import sys
import tempfile
import time

import keras
import tensorflow as tf

from kbert.backend.tensorflow_process import call_in_tensorflow, caller_has_ended
from kbert.io.atomic_files import ordinary_modes, process_is_running, special_file_kind
from kbert.saving import load_model
from kbert.serving import op_allowlist
from kbert.serving.serving_module import ServingModule

_VERSION = re.compile(r"^[0-9]+$")
# Hidden work folders beside the versions: `.3.partial-<host>-<pid>-<random>`
# while version 3 is written, `.3.old-<host>-<pid>-<random>` holding the
# version an overwrite replaces. The writer's host and process id say
# whether a folder left behind is still in use.
_WORK_FOLDER = re.compile(r"^\.(?P<version>[0-9]+)\.(?P<kind>partial|old)-(?:(?P<host>.+)-(?P<pid>[0-9]+)-)?[^-]*$")
# What `tf.saved_model.save` writes into a version folder: what an overwrite
# replaces. Anything else there (TF Serving's `assets.extra/`) is the user's.
SAVED_MODEL_FILES = frozenset({"saved_model.pb", "saved_model.pbtxt", "saved_model.cpb", "fingerprint.pb",
                               "variables", "assets"})
# A work folder whose writer cannot be asked (another machine, or an older
# name without one) is stale after this long: no export takes a day.
STALE_AFTER_S = 24 * 3600
# How many times an export renames its version into place when other
# exports to the same folder keep taking the version first.
VERSION_TRIES = 100


def export(model, directory, version=None, overwrite=False, text_pairs=None):
    """Exports a task model for TF Serving, as `directory/<version>/`.

    The SavedModel takes raw strings: tokenization runs inside the graph with
    core TensorFlow and TF-Text ops that TF Serving's model server has (see
    `kbert.serving.check_ops`), so a client sends plain text. Its vocabulary
    is the asset `assets/vocab.txt`; no path of this machine is stored.

    Signatures (inputs are batches, outputs dicts of named tensors):

    - `serving_default`, on raw text:
      - `Classifier`: `text` (and `text_pair` for a pair model) ->
        `probabilities` `(batch, classes)`, `label_ids` `(batch,)`, and
        `labels` (class names) when the model has `class_names`;
      - `Embedder`: `text` (and `text_pair`) -> `sentence_embedding`;
      - `Tagger`: `text` -> per word, padded to the batch's most words:
        `words`, `tags`, `tag_ids` (-1 on padding), `scores` (the tag's
        probability), `word_starts`, `word_ends` (character offsets in the
        text); and `word_counts`. Words are split as the tokenizer splits
        them: on whitespace, each punctuation mark a word of its own;
      - `QuestionAnswerer`: `question`, `context` -> `text`, `start`,
        `end` (character offsets in the context), `score`, and the n-best
        `candidate_texts`, `candidate_starts`, `candidate_ends`,
        `candidate_scores`, `candidate_counts`;
      - `MultipleChoice`: `context`, `choices` `(batch, num_choices)` ->
        `probabilities`, `choice_ids`;
    - `from_token_ids`: `token_ids`, `segment_ids`, `padding_mask` ->
      the same outputs for classifiers, embedders and multiple choice;
      per-token `tag_ids`, `tags`, `probabilities` for a tagger;
      `start_logits`, `end_logits` for question answering;
    - `from_tf_example`: `examples`, serialized `tf.train.Example`s with
      bytes features named as `serving_default`'s inputs -> its outputs.

    The version folder appears complete or not at all: the SavedModel is
    written to a hidden folder beside it (TF Serving skips names that are
    not numbers), its ops are checked against the ops of TF Serving's
    model server (`kbert.serving.check_ops`), and only then is it renamed
    into place, so a model server polling `directory` never loads half a
    model or one it cannot run. The rename never replaces a version another
    export wrote meanwhile: without `version`, the export takes the next
    free one instead. Hidden folders that an export killed midway
    left behind (their writer is no longer running) are removed first.

    The version folder and its files get the permissions of ordinary new
    files under the process's umask (with umask 022: folders `rwxr-xr-x`,
    files `rw-r--r--`), so a model server running as another user can read
    them.

    A model fine-tuned with LoRA adapters is exported with each adapter
    folded into its kernel (`merge_lora`): the SavedModel is the graph of a
    fully fine-tuned model, of the same size and speed.

    The SavedModel is TensorFlow's format: on the JAX and PyTorch backends
    the model is saved as a `.keras` file and exported by a TensorFlow
    process (`KERAS_BACKEND=tensorflow`), with the same result.

    Args:
        model: a kbert task model.
        directory: the model's folder, e.g. `"saved_models/spam"`.
        version: a positive integer; default one more than the highest
            version in `directory` (1 for the first), or the next free one
            if other exports take it meanwhile.
        overwrite: replace an existing version (it is moved aside first,
            then deleted once the new one is in place). Only its
            SavedModel is replaced: what else the version folder holds
            (`assets.extra/` with TF Serving's warm-up requests, notes) is
            copied into the new version before it goes live.
        text_pairs: for a classifier or embedder, whether it takes text
            pairs; default: what the model was trained or used on.

    Returns:
        The path of the version folder.

    Raises:
        ValueError: when the graph uses an op that TF Serving's model
            server lacks; nothing is exported.
        FileExistsError: when the version exists, or another export wrote
            it meanwhile, and `overwrite` is False.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40,
    ...                                verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> path = kbert.export(clf, os.path.join(folder, "films"), text_pairs=False)
    >>> os.path.basename(path)
    '1'
    >>> served = tf.saved_model.load(path).signatures["serving_default"]
    >>> served(text=tf.constant(["a good film"]))["probabilities"].shape
    TensorShape([1, 2])
    """
    directory = os.fspath(directory)
    if keras.config.backend() != "tensorflow":
        return _export_in_tensorflow(model, directory, version, overwrite, text_pairs)
    if getattr(getattr(model, "encoder", None), "lora", None) is not None:
        model = model.merge_lora()  # served as a fully fine-tuned model: the same graph, size and speed
    module = ServingModule(model, text_pairs=text_pairs)  # fails early on a model it cannot serve
    os.makedirs(directory, exist_ok=True)
    _remove_stale_work_folders(directory)
    chosen = version is None
    version = _choose_version(directory, version)
    target = os.path.join(directory, str(version))
    if os.path.lexists(target) and not overwrite:
        raise FileExistsError(
            f"{target} exists; export to another version, or pass overwrite=True to replace it."
        )
    if os.path.lexists(target) and not os.path.isfile(os.path.join(target, "saved_model.pb")):
        raise ValueError(f"{target} is not an exported model (no saved_model.pb), so overwrite=True does not "
                         "replace it; export to another version.")
    if os.path.lexists(target):
        _check_replaceable(target)
    staging = tempfile.mkdtemp(prefix=_work_prefix(version, "partial"), dir=directory)
    try:
        tf.saved_model.save(module, staging, signatures=module.signatures())
        missing = op_allowlist.unserved_ops(op_allowlist.saved_model_ops(staging))
        if missing:
            raise ValueError(
                f"Did not export {type(model).__name__} to {target}: its graph uses ops that "
                f"{op_allowlist.served_by()} lacks, so the model server could not load it: {missing}."
            )
        ordinary_modes(staging)  # mkdtemp's 0700 would hide it from a server running as another user
        _check_parent(target)
        target = _move_into_place(staging, target, overwrite and not chosen, chosen)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _export_in_tensorflow(model, directory, version, overwrite, text_pairs):
    """`export` of a model of another backend: its `.keras` file, exported by a TensorFlow process.

    The process dies with this one: killed, it never publishes a version.
    Its errors come back as one line.
    """
    arguments = {"directory": directory, "version": version, "overwrite": overwrite, "text_pairs": text_pairs}
    with tempfile.TemporaryDirectory(prefix="kbert-export-") as folder:
        arguments["model"] = os.path.join(folder, "model.keras")
        try:
            model.save(arguments["model"])
        except OSError as error:  # a full disk or file size limit: say where, as TMPDIR chooses it
            raise type(error)(error.errno, f"{error.strerror or error} (the model's copy for the TensorFlow "
                                           "export process; TMPDIR chooses its folder)",
                              arguments["model"]) from None
        return call_in_tensorflow("kbert.serving.exporter:export_file", arguments, "exporting the model")


def export_file(arguments):
    """`export` of the `.keras` file in `arguments` (`export`'s arguments, and `model`: the file): the version's path."""
    model = load_model(arguments.pop("model"))
    return export(model, **arguments)


def _check_parent(target):
    """In an export process started by `_export_in_tensorflow`: refuses to publish once its parent has died."""
    if caller_has_ended():
        raise ChildProcessError(f"Did not export to {target}: the process that asked for the export has ended.")


def versions(directory):
    """The version numbers in a model folder, ascending (what TF Serving would see)."""
    if not os.path.isdir(directory):
        return []
    return sorted(
        int(name) for name in os.listdir(directory)
        if _VERSION.match(name) and os.path.isdir(os.path.join(directory, name))
    )


def latest_version(directory):
    """The highest version folder of a model folder; a SavedModel folder itself is returned as is."""
    directory = os.fspath(directory)
    if os.path.exists(os.path.join(directory, "saved_model.pb")):
        return directory
    found = versions(directory)
    if not found:
        raise FileNotFoundError(
            f"No SavedModel in {directory}: expected saved_model.pb or numbered version folders "
            "(as kbert.export writes them)."
        )
    return os.path.join(directory, str(found[-1]))


def _choose_version(directory, version, after=0):
    """`version`, checked; if None, one more than the highest version (and `after`) whose name is free."""
    if version is None:
        version = max([after, *versions(directory)]) + 1
        while os.path.lexists(os.path.join(directory, str(version))):  # a file, or a link, by that name
            version += 1
        return version
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"`version` must be a positive integer, got {version!r}.")
    return version


def _move_into_place(staging, target, overwrite, chosen):
    """Renames `staging` to the version folder `target`; returns the version folder it became.

    Another export may write `target` between the check in `export` and the
    rename, which never replaces it: a version `chosen` by `export` becomes
    the next free one (the staged folder is renamed there, not written
    again); with `overwrite`, the newcomer is moved aside as the version
    found at first was; otherwise it is an error.
    """
    directory, version = os.path.split(target)
    for _ in range(VERSION_TRIES):
        target = os.path.join(directory, version)
        old = None
        if overwrite and os.path.lexists(target):
            _carry_over(target, staging)
            old = tempfile.mkdtemp(prefix=_work_prefix(version, "old"), dir=directory)
            os.rename(target, os.path.join(old, "saved_model"))
        try:
            _rename_no_replace(staging, target)
        except FileExistsError:
            if old is not None:  # replaced by the newcomer already
                shutil.rmtree(old, ignore_errors=True)
            if chosen:
                version = str(_choose_version(directory, None, after=int(version)))
            elif not overwrite:
                raise FileExistsError(
                    f"Version {version} in {directory} was written by another export meanwhile; "
                    "export to another version, or pass overwrite=True to replace it."
                ) from None
            continue
        except BaseException:
            if old is not None:  # put the old version back
                _rename_no_replace(os.path.join(old, "saved_model"), target)
                shutil.rmtree(old, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return target
    raise FileExistsError(
        f"Did not export to {directory}: other exports took the version first, {VERSION_TRIES} times in a row; "
        "export again."
    )


def _check_replaceable(version_folder):
    """Before any work: refuses a version whose own files are not regular, or whose other files cannot be copied.

    A named pipe, device or socket is never replaced (`kbert.runs.outputs`),
    nor can one be copied into the new version (`_carry_over`).
    """
    for name in sorted(os.listdir(version_folder)):
        path = os.path.join(version_folder, name)
        inside = [path]
        if name not in SAVED_MODEL_FILES and os.path.isdir(path) and not os.path.islink(path):
            inside = [os.path.join(folder, entry) for folder, folders, files in os.walk(path)
                      for entry in folders + files]
        for found in inside:
            kind = special_file_kind(found)
            if kind is not None:
                raise ValueError(f"{found} is {kind}, which an export neither writes nor copies into a new "
                                 f"version, so overwrite=True does not replace {version_folder}; export to another "
                                 "version.")


def _carry_over(version_folder, staging):
    """Copies into `staging` what is in `version_folder` that an export does not write there (`assets.extra/`, ...).

    An overwrite replaces the version's SavedModel (`SAVED_MODEL_FILES`),
    and nothing else of it: TF Serving's warm-up requests
    (`assets.extra/tf_serving_warmup_requests`), or any other file put
    beside them, arrive with the new version, so a model server never sees
    it without them. They are copied, not moved: until the new version is in
    place, the old one stands whole, and a failure leaves it so.
    """
    for name in sorted(os.listdir(version_folder)):
        source, copy = os.path.join(version_folder, name), os.path.join(staging, name)
        if name in SAVED_MODEL_FILES or os.path.lexists(copy):  # the export's own, or carried over already
            continue
        try:
            if os.path.isdir(source) and not os.path.islink(source):
                shutil.copytree(source, copy, symlinks=True)
            else:
                shutil.copy2(source, copy, follow_symlinks=False)
        except (OSError, shutil.Error) as error:
            raise OSError(f"Did not replace {version_folder}: could not copy its {name}, which the export does "
                          f"not write, into the new version ({error}).") from None


_AT_FDCWD, _RENAME_NOREPLACE = -100, 1


@functools.cache
def _renameat2():
    """Linux's `renameat2` (glibc 2.28 and later), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _rename_no_replace(source, target):
    """`os.rename`, but FileExistsError where `target` exists, even as an empty folder.

    `rename` fails on a folder that holds files, as a version does, but
    replaces an empty one. Linux's `renameat2` with `RENAME_NOREPLACE` never
    replaces; elsewhere, or on a file system without it, the target is
    checked just before the rename.
    """
    rename = _renameat2()
    if rename is not None:
        if rename(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS):  # those: the file system or kernel cannot; fall back
            raise OSError(code, os.strerror(code), source, None, target)  # FileExistsError for EEXIST
    if os.path.lexists(target):  # lexists: a dangling link is there too
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), source, None, target)
    try:
        os.rename(source, target)
    except OSError as error:
        if os.path.lexists(target):  # ENOTEMPTY, ENOTDIR, or Windows' FileExistsError
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), source, None, target) from error
        raise


def _remove_stale_work_folders(directory):
    """Removes the hidden work folders of exports to `directory` that were killed midway.

    A folder is stale when its writer, named in the folder's name, is a
    process of this machine that no longer runs, or when it is older than
    `STALE_AFTER_S` (so a writer that cannot be asked, on another machine
    sharing the folder, is given a day). A half-written `.N.partial-*`
    folder is deleted. A `.N.old-*` folder holds the version
    `N` that an overwrite moved aside: it is put back when version `N` is
    missing (the new one never arrived), deleted otherwise.

    Returns:
        The names of the folders removed or put back.
    """
    removed = []
    for name in sorted(os.listdir(directory)):
        match = _WORK_FOLDER.match(name)
        path = os.path.join(directory, name)
        if not match or not os.path.isdir(path) or not _is_stale(path, match):
            continue
        target = os.path.join(directory, match["version"])
        kept = os.path.join(path, "saved_model")
        if match["kind"] == "old" and not os.path.exists(target) and os.path.isdir(kept):
            try:
                _rename_no_replace(kept, target)
            except OSError:  # a version N appeared meanwhile: keep the old one where it is
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    return removed


def _host():
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def _work_prefix(version, kind):
    return f".{version}.{kind}-{_host()}-{os.getpid()}-"


def _is_stale(path, match):
    if match["pid"] is not None and match["host"] == _host() and not process_is_running(int(match["pid"])):
        return True
    # Otherwise by age, which also catches a dead writer whose process id
    # a new process got (a container's writer is often process 1).
    try:
        age = time.time() - os.stat(path).st_mtime
    except FileNotFoundError:  # another export removed it just now
        return False
    return age > STALE_AFTER_S


