"""A pretraining run folder's record of what defines the run, and the check that a resume is the same run.

`kbert pretrain --out DIR` writes `DIR/settings.json` once its first batch
is trained (with `DIR/vocab.txt`, before any backup): the settings that
define the run (`DEFINING`: encoder, objective, examples, masking,
schedule, seed), what the corpus was (each text file's
path and size, or a prepared folder's `metadata.json` and `vocab.txt`,
by sha256) and the sha256 of `DIR/vocab.txt`. Every later `kbert pretrain`
of `DIR` (a resume after a kill, or a run again after the end) must be the
same run: `check_same_run` refuses, in one line naming the setting, a setting
that differs, another corpus, another `vocabulary`, or a `vocab.txt`
edited in the folder, before anything is read or learned.

Run folders of kbert versions before the record resume as before, with a
note that nothing could be checked; their resume then writes the record.
"""

import hashlib
import json
import math
import os

from kbert.io.atomic_files import json_text, write_atomically, write_text
from kbert.io.setting_error import SettingError
from kbert.runs.own_data import sha256_of

SETTINGS_FILE = "settings.json"
VOCABULARY_FILE = "vocab.txt"
FORMAT = "kbert-pretraining-run/1"

# The settings that define a run, in the order they are checked, as its
# record names them. The record's `lowercase` is the setting `cased`, its opposite.
DEFINING = (
    "preset", "embedding_size", "num_groups", "attention_dropout", "objective", "sequence_length", "lowercase",
    "vocabulary_size", "batch_size", "gradient_accumulation_steps", "epochs", "steps_per_epoch", "learning_rate",
    "mask_rate", "whole_word_masking", "max_ngram", "document_boundary", "seed",
)
_SETTING = {"lowercase": "cased"}
# Settings that apply to some runs only (`None` where they do not: the
# vocabulary's size where it was not learned, the document boundary of a
# prepared corpus): compared where both runs have them.
_WHERE_USED = {"vocabulary_size", "document_boundary"}
# What a value of `None` means, said in a message.
_UNSET = {
    "embedding_size": "the preset's",
    "num_groups": "the preset's",
    "attention_dropout": "the preset's",
    "gradient_accumulation_steps": "none",
    "steps_per_epoch": "one pass over the corpus",
}
_NEW_RUN = "to resume, give this run's settings again; to start a new run, choose another `out`"
_PUT_BACK = "Put the run's back, or choose another `out` to start a new run."


def _refusal(message, *names):
    """A refusal naming settings (and `pretrain`'s `out`, `corpus`, `vocabulary`) in backticks, which the command says as flags."""
    return SettingError(message, ["out", *names])


def corpus_identity(corpus, prepared=None):
    """What the corpus of a run is, for `check_same_run`: cheap to take, before any of it is read.

    A prepared folder (`kbert prepare-pretraining`) is its `metadata.json`
    and `vocab.txt` (sha256 of both: they record its shards, their sizes, its
    seed and settings); text files are their paths (absolute, in the order
    read) and sizes.
    """
    if prepared is not None:
        digest = hashlib.sha256()
        for name in ("metadata.json", VOCABULARY_FILE):
            digest.update(sha256_of(os.path.join(prepared, name)).encode())
        return {"prepared": os.path.abspath(prepared), "sha256": digest.hexdigest()}
    from kbert.pretraining.documents import corpus_files

    return {"files": [[os.path.abspath(path), os.path.getsize(path)] for path in corpus_files(corpus)]}


def read_record(out):
    """The settings record of the run folder `out`, or None where it has none (a new folder, or an earlier kbert's)."""
    path = os.path.join(out, SETTINGS_FILE)
    try:
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _refusal(f"{path}: not the JSON that kbert pretrain writes ({error}); it was cut short or edited. "
                       + _PUT_BACK) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else None
        raise _refusal(f"{path} is not a settings record of kbert pretrain (format {found!r}, not {FORMAT!r}); "
                       "choose another `out` to start a new run.")
    for key, kind in (("settings", dict), ("corpus", dict), ("vocabulary_sha256", str)):
        if not isinstance(record.get(key), kind):
            raise _refusal(f"{path}: the key {key!r} is missing or is not a {kind.__name__}; it was edited. "
                           + _PUT_BACK)
    return record


def check_same_run(out, settings, corpus, vocabulary=None):
    """Refuses a `kbert pretrain` of the run folder `out` that is not the run recorded there; a note, or None.

    Args:
        out: the run folder.
        settings: this command's value of each setting of `DEFINING`, as
            `record_run` records them (defaults resolved).
        corpus: a function that gives this command's `corpus_identity`
            (called only where there is a record to compare it with, so that
            a missing corpus is reported by the reader, in its words).
        vocabulary: the `vocabulary` path given, or None.

    Returns:
        A line to show where `out` holds a backup of a run of an earlier
        kbert, which recorded no settings; None otherwise.

    Raises:
        SettingError: in one line, its settings in backticks: the first
            setting that differs from the record, with both values; a corpus
            other than the run's; a `vocabulary` other than the folder's
            `vocab.txt` (with or without a record); a `vocab.txt` other than
            the one the run began with.
    """
    path = os.path.join(out, SETTINGS_FILE)
    saved_vocabulary = os.path.join(out, VOCABULARY_FILE)
    record = read_record(out)
    if record is not None:
        _check_settings(record["settings"], settings, path)
        _check_corpus(record["corpus"], corpus(), path)
        if not os.path.isfile(saved_vocabulary):
            raise _refusal(f"{saved_vocabulary}, this run's vocabulary, is missing ({path} records its sha256): "
                           "put it back; to start a new run, choose another `out`.")
        if sha256_of(saved_vocabulary) != record["vocabulary_sha256"]:
            raise _refusal(f"{saved_vocabulary} is not the vocabulary this run began with (its sha256 differs from "
                           f"the one {path} records): it was edited or replaced, and the model's token ids are "
                           "of the run's; put that back; to start a new run, choose another `out`.")
    if vocabulary is not None and os.path.isfile(saved_vocabulary):
        from kbert.preprocessing.tokenizer import read_vocabulary

        if read_vocabulary(vocabulary) != read_vocabulary(saved_vocabulary):
            raise _refusal(f"`vocabulary` {vocabulary} differs from {saved_vocabulary}, the vocabulary of the run "
                           f"in {out}; {_NEW_RUN} (or leave `vocabulary` out: a resume reads the run's).",
                           "vocabulary")
    if record is None and os.path.exists(os.path.join(out, "backup", "training_metadata.json")):
        return (f"{out} records no settings (a run of an earlier kbert version): it resumes without a check that "
                f"this command's settings are the run's, which it records in {path} for later resumes.")
    return None


def record_run(out, settings, corpus):
    """Writes the run folder's `settings.json`: `settings`, the `corpus` and the sha256 of its `vocab.txt`."""
    record = {
        "format": FORMAT,
        "settings": dict(settings),
        "corpus": corpus,
        "vocabulary_sha256": sha256_of(os.path.join(out, VOCABULARY_FILE)),
    }
    text = json_text(record)
    write_atomically(os.path.join(out, SETTINGS_FILE), lambda temporary: write_text(temporary, text))


def _check_settings(recorded, settings, path):
    for name in DEFINING:
        if name not in recorded:
            raise _refusal(f"{path}: the key {name!r} is missing; it was edited. {_PUT_BACK}")
        old, new = recorded[name], settings[name]
        if name in _WHERE_USED and (old is None or new is None):
            continue
        if not _same(old, new):
            setting = _SETTING.get(name, name)
            raise _refusal(f"`{setting}` {_value(name, new)} differs from this run's {_value(name, old)} ({path} "
                           f"records the run's settings); {_NEW_RUN}.", setting)


def _same(old, new):
    """Equal values; floats equal but for their last bits (6e-4 given, or computed as 0.0006000000000000001)."""
    if isinstance(old, float) or isinstance(new, float):
        return (isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool)
                and not isinstance(new, bool) and math.isclose(old, new, rel_tol=1e-9))
    return old == new


def _value(name, value):
    if name == "lowercase":  # said as `cased`, its opposite
        value = not value
    if isinstance(value, bool):
        return "(given)" if value else "(not given)"
    if value is None:
        return f"({_UNSET.get(name, 'none')})"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _check_corpus(recorded, corpus, path):
    def differs(what):
        return _refusal(f"`corpus` {what} ({path} records the run's corpus); {_NEW_RUN}.", "corpus")

    if "prepared" in recorded or "prepared" in corpus:
        if "prepared" not in corpus:
            raise differs(f"gives text files, and this run read the prepared folder {recorded['prepared']}")
        if "prepared" not in recorded:
            raise differs(f"{corpus['prepared']} is a prepared folder, and this run read text files")
        if recorded.get("sha256") != corpus["sha256"]:
            raise differs(f"{corpus['prepared']} is not the prepared corpus this run read ({recorded['prepared']}): "
                          "its metadata.json or vocab.txt differs")
        return
    old = [tuple(item) for item in recorded.get("files", ())]
    new = [tuple(item) for item in corpus["files"]]
    if old == new:
        return
    old_sizes, new_sizes = dict(old), dict(new)
    for file in old_sizes:
        if file not in new_sizes:
            raise differs(f"does not give {file}, which this run read")
    for file, size in new:
        if file not in old_sizes:
            raise differs(f"gives {file}, which this run did not read")
        if size != old_sizes[file]:
            raise differs(f"gives {file} of {size:,} bytes, which was {old_sizes[file]:,} when this run read it")
    raise differs("gives this run's files in another order")
