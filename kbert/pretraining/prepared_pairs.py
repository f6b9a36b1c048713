"""Prepared pretraining data: a corpus' segment pairs written once as sharded TFRecords, and read back.

`prepare_pretraining_data` (`kbert prepare-pretraining`) writes a folder of
shards, `vocab.txt` and `metadata.json`; `PreparedPairs` reads it for
`pretraining_dataset`, for corpora too large to tokenize again every epoch.
"""

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import tensorflow as tf

from kbert.io.settings_objects import settings_from_arguments
from kbert.io.atomic_files import contains_path, left_temporaries, make_folder_beside, special_file_kind
from kbert.preprocessing.tokenizer import Tokenizer, read_vocabulary
from kbert.pretraining.corpus_progress import Progress, end_pass, reading_line
from kbert.pretraining.documents import corpus_files
from kbert.pretraining.pretraining_settings import DEFAULT_SEQUENCE_LENGTH, PretrainingSettings
from kbert.pretraining.text_pairs import TextPairs

METADATA_FILE = "metadata.json"
VOCABULARY_FILE = "vocab.txt"
FORMAT = "kbert-pretraining-pairs/1"
_SHARD_NAME = re.compile(r"pairs-[0-9]{5,}\.tfrecord")


def prepared_folder(corpus):
    """The folder of `prepare_pretraining_data` that `corpus` names (alone or as a list of one), or `None`."""
    if isinstance(corpus, (list, tuple)) and len(corpus) == 1:
        corpus = corpus[0]
    if isinstance(corpus, (str, os.PathLike)) and (Path(corpus) / METADATA_FILE).is_file():
        return corpus
    return None


def prepared_objective(metadata):
    """The pair objective a prepared folder was written for (older folders say `next_sentence`)."""
    return metadata.get("objective", "nsp" if metadata["next_sentence"] else "none")


def read_metadata(folder):
    """The `metadata.json` of a prepared folder, checked to be kbert's."""
    path = Path(folder) / METADATA_FILE
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not the JSON that kbert prepare-pretraining writes ({error}); it was cut short "
                         "or edited: prepare the corpus again.") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        found = metadata.get("format") if isinstance(metadata, dict) else None
        raise ValueError(f"{path} is not kbert pretraining data (format {found!r}).")
    # Shards are read from the folder itself, never from a path named in the file.
    bad = [name for name in metadata.get("shards", ()) if not (isinstance(name, str) and _SHARD_NAME.fullmatch(name))]
    if bad:
        raise ValueError(f"{path}: the shard {bad[0]!r} is not a shard file name of the folder "
                         "(pairs-NNNNN.tfrecord).")
    _check_keys(metadata, path)
    return metadata


def _check_keys(metadata, path):
    """Refuses, naming the key, a `metadata.json` that lacks what a reader needs or whose shard lists do not agree."""
    def refuse(key, what):
        raise ValueError(f"{path}: the key {key!r} {what}; the file was edited or is not whole: prepare the "
                         "corpus again.")

    for key, kinds in (("shards", list), ("num_examples", int), ("sequence_length", int), ("lowercase", bool)):
        if key not in metadata:
            refuse(key, "is missing")
        if not isinstance(metadata[key], kinds) or (kinds is int and isinstance(metadata[key], bool)):
            refuse(key, f"is {metadata[key]!r}, not a {kinds.__name__}")
    if "objective" not in metadata and "next_sentence" not in metadata:
        refuse("objective", "is missing")
    for key in ("shard_sizes", "shard_bytes"):
        if key not in metadata:
            continue  # folders of earlier kbert versions
        values = metadata[key]
        if (not isinstance(values, list) or len(values) != len(metadata["shards"])
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
            refuse(key, f"is not a count for each of the {len(metadata['shards'])} shard(s)")
    if "shard_sizes" in metadata and sum(metadata["shard_sizes"]) != metadata["num_examples"]:
        refuse("num_examples", f"is {metadata['num_examples']:,}, and the shards hold {sum(metadata['shard_sizes']):,}")


def check_shards(folder, metadata=None):
    """Refuses, in one line naming the shard file, a shard of a prepared folder that is missing or not its recorded size.

    The sizes in bytes that `metadata.json` records (`shard_bytes`) are
    compared with the files before anything is read, so a shard cut short,
    even at the end of a record, or grown, is found at once. Folders written
    by kbert versions before those sizes were recorded are checked for
    missing shards only (a warning says so): prepare them again to have
    every shard checked.
    """
    folder = Path(folder)
    metadata = read_metadata(folder) if metadata is None else metadata
    path = folder / METADATA_FILE
    sizes = metadata.get("shard_bytes")
    for number, name in enumerate(metadata["shards"]):
        shard = folder / name
        if not shard.is_file():
            raise ValueError(f"{shard} is missing: {path} lists it as shard {number + 1} of "
                             f"{len(metadata['shards'])}; the folder is not whole: prepare the corpus again.")
        size = shard.stat().st_size
        if sizes is not None and size != sizes[number]:
            change = "cut short" if size < sizes[number] else "changed"
            raise ValueError(f"{shard} is {size:,} bytes, and {path} records {sizes[number]:,}: the shard was "
                             f"{change}, and would give other pairs than the folder's; prepare the corpus again.")
    if sizes is None:
        import warnings

        warnings.warn(f"{path} records no shard sizes in bytes (a folder of an earlier kbert version): a shard cut "
                      "short is found only when it is read, or not at all where it ends at a record's end; prepare "
                      "the corpus again to have its shards checked before pretraining.", stacklevel=3)


def unreadable_shard(folder):
    """The one line naming the first shard of a prepared folder that cannot be read whole, or None where all can.

    For the error of a pretraining run whose reading failed (TensorFlow's
    own message names no file): each shard is read to its end and parsed,
    and its records counted against `metadata.json`'s `shard_sizes`.
    """
    folder = Path(folder)
    metadata = read_metadata(folder)
    counts = metadata.get("shard_sizes")
    for number, name in enumerate(metadata["shards"]):
        shard = folder / name
        records = 0
        try:
            for _ in tf.data.TFRecordDataset(str(shard)).map(_parse_pair):
                records += 1
        except (tf.errors.OpError, OSError) as error:
            reason = getattr(error, "message", None) or str(error)
            # TensorFlow's words without its op and function names: "corrupted record at 242".
            reason = re.sub(r"\{\{[^}]*\}\}|\[Op:[^]]*\].*", "", " ".join(reason.split())).strip() or reason
            return (f"{shard}: record {records + 1} cannot be read ({reason}): the shard is corrupt; prepare the "
                    "corpus again.")
        if counts is not None and records != counts[number]:
            return (f"{shard} holds {records:,} records, and {folder / METADATA_FILE} records {counts[number]:,}; "
                    "prepare the corpus again.")
    return None


def shard_sizes(folder):
    """The number of segment pairs in each shard of a prepared folder, in the metadata's order."""
    metadata = read_metadata(folder)
    if "shard_sizes" in metadata:
        return list(metadata["shard_sizes"])
    # Folders written before the sizes were recorded: count the records.
    return [sum(1 for _ in tf.data.TFRecordDataset(str(Path(folder) / name))) for name in metadata["shards"]]


class PreparedPairs:
    """The segment pairs of a prepared folder, read with the settings asked for.

    A vocabulary, tokenizer, `sequence_length` or objective other than the
    folder's is an error; `settings` takes the folder's length and objective.
    """

    def __init__(self, folder, settings, vocabulary=None, tokenizer=None):
        metadata = read_metadata(folder)
        prepared_vocabulary = read_vocabulary(str(Path(folder) / VOCABULARY_FILE))
        if vocabulary is not None and read_vocabulary(vocabulary) != prepared_vocabulary:
            raise ValueError(f"`vocabulary` differs from the one {folder} was prepared with.")
        if tokenizer is not None and tokenizer.get_vocabulary() != prepared_vocabulary:
            raise ValueError(f"The tokenizer's vocabulary differs from the one {folder} was prepared with.")
        if settings.sequence_length is not None and settings.sequence_length != metadata["sequence_length"]:
            raise ValueError(
                f"{folder} was prepared with sequence_length={metadata['sequence_length']!r}; "
                f"got sequence_length={settings.sequence_length!r}."
            )
        objective, requested = prepared_objective(metadata), settings.requested_objective
        if requested is not None and requested != objective:
            asked = f"objective={requested!r}" + (
                f" (next_sentence={settings.next_sentence!r})" if settings.next_sentence is not None else ""
            )
            raise ValueError(
                f"{folder} was prepared for objective={objective!r}; got {asked}. Prepare the "
                f"corpus again with objective={requested!r}, or train with objective={objective!r}."
            )
        self.settings = dataclasses.replace(settings, sequence_length=metadata["sequence_length"],
                                            objective=objective, next_sentence=None)
        self.tokenizer = Tokenizer(prepared_vocabulary, lowercase=metadata["lowercase"],
                                   special_tokens_in_strings=False)
        check_shards(folder, metadata)
        self.shards = [str(Path(folder) / name) for name in metadata["shards"]]
        self.num_examples = metadata["num_examples"]

    def count_examples(self, verbose=False):
        """The pairs of one pass, as the folder records them."""
        return self.num_examples

    def dataset(self, worker=0, workers=1):
        """One pass of the pairs as `tf.data`; several workers split the shards by file."""
        return tf.data.TFRecordDataset(self.shards[worker::workers]).map(_parse_pair)


def _parse_pair(record):
    features = tf.io.parse_single_example(
        record,
        {
            "segment_a": tf.io.RaggedFeature(tf.int64),
            "segment_b": tf.io.RaggedFeature(tf.int64),
            "next_sentence_label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return (
        tf.cast(features["segment_a"], tf.int32),
        tf.cast(features["segment_b"], tf.int32),
        tf.cast(features["next_sentence_label"], tf.int32),
    )


def _pair_example(segment_a, segment_b, label):
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "segment_a": ints(segment_a),
                "segment_b": ints(segment_b),
                "next_sentence_label": ints([label]),
            }
        )
    ).SerializeToString()


# The settings a preparation leaves to the reader of its folder.
_READERS_FIELDS = ("batch_size", "mask_rate", "mask_token_rate", "random_token_rate", "max_predictions",
                   "whole_word_masking", "shuffle_buffer", "count_examples", "max_ngram")


def _preparation_settings(settings, options):
    """The `PretrainingSettings` a preparation writes with: 128 tokens and seed 0 where unset."""
    settings = settings_from_arguments(PretrainingSettings, settings, options, "prepare_pretraining_data()",
                                       "kbert.PretrainingSettings")
    defaults = PretrainingSettings()
    for name in _READERS_FIELDS:
        if getattr(settings, name) != getattr(defaults, name):
            raise ValueError(f"`{name}` is a setting of the reader (`pretraining_dataset`), not of the "
                             "preparation: the records hold unmasked pairs.")
    return dataclasses.replace(
        settings,
        sequence_length=DEFAULT_SEQUENCE_LENGTH if settings.sequence_length is None else settings.sequence_length,
        seed=0 if settings.seed is None else settings.seed,
    )


def prepare_pretraining_data(corpus, output_dir, vocabulary, settings=None, *, examples_per_shard=100_000,
                             overwrite=False, **options):
    """Writes the corpus' segment pairs once, as sharded TFRecords.

    `pretraining_dataset(output_dir, seed=seed)` then reads them and gives
    exactly the examples `pretraining_dataset(corpus, seed=seed)` gives,
    without tokenizing the text again. Masking stays dynamic: the records
    hold the unmasked pairs. The folder holds the shards, `vocab.txt` and
    `metadata.json` (settings, the pair `objective`, example count, what was
    skipped); `pretraining_dataset` refuses to read it for another objective.
    Masking options (`mask_rate`, `max_ngram`, ...) are the reader's. It is
    written aside and renamed into place when complete, so a reader never
    sees half of it.

    With `verbose`, the files, documents, pairs and shards done so far are
    shown on stderr while it runs (a line rewritten in place on a terminal;
    elsewhere a plain line every 10 s and at each completed shard), then a
    summary of what was read and skipped.

    Args:
        corpus: text files: paths, folders or glob patterns (each must match).
        output_dir: the folder to write; it must not exist, unless `overwrite`.
        vocabulary: a list of tokens or a `vocab.txt` path.
        settings: a `kbert.PretrainingSettings`; or its pair-building fields
            as keywords (`sequence_length` (128), `objective`, `next_sentence`,
            `next_sentence_rate`, `sentence_order_rate`, `short_sequence_rate`,
            `document_boundary`, `document_buffer`, `seed` (0), `lowercase`,
            `verbose`), as `pretraining_dataset` takes them. Its masking and
            batching fields are the reader's: set here, a ValueError.
        examples_per_shard: segment pairs per TFRecord file.
        overwrite: replace `output_dir` where it holds an earlier preparation.

    Returns:
        The metadata dict.

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(f"{folder}/corpus.txt", "w") as file:
    ...     _ = file.write("the cat sat. the dog ran.\\n\\nthe bird sang. the fish swam.\\n")
    >>> vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "ran", "."]
    >>> metadata = prepare_pretraining_data(f"{folder}/corpus.txt", f"{folder}/prepared", vocabulary,
    ...                                     sequence_length=16, document_boundary="blank_line", verbose=False)
    >>> metadata["objective"], metadata["num_examples"] > 0
    ('nsp', True)
    """
    settings = _preparation_settings(settings, options)
    output_dir = Path(output_dir)
    remove_interrupted_preparations(output_dir)
    if output_dir.exists():
        _check_replaceable(output_dir, corpus, vocabulary, overwrite)
    if int(examples_per_shard) < 1:
        raise ValueError(f"`examples_per_shard` must be at least 1, got {examples_per_shard}.")
    tokenizer = Tokenizer(vocabulary, lowercase=settings.lowercase, special_tokens_in_strings=False)
    source = TextPairs(corpus, tokenizer, settings)
    objective = source.builder.objective
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    # Not `tempfile.mkdtemp`: its 0700 would hide the published corpus from other users.
    staging = Path(make_folder_beside(output_dir))
    shards, writer, count = [], None, 0
    progress = Progress(lambda: reading_line(source, count, len(shards)), settings.verbose)
    try:
        for segment_a, segment_b, label in source():
            if count % examples_per_shard == 0:
                if writer:
                    writer.close()
                    progress.show(force=True)  # a shard is complete
                shards.append(f"pairs-{len(shards):05d}.tfrecord")
                writer = tf.io.TFRecordWriter(str(staging / shards[-1]))
            writer.write(_pair_example(segment_a, segment_b, label))
            count += 1
            progress.show()
        if writer:
            writer.close()
        end_pass(progress, source, count)
        metadata = {
            "format": FORMAT,
            "num_examples": count,
            "shards": shards,
            "shard_sizes": [min(int(examples_per_shard), count - i * int(examples_per_shard))
                            for i in range(len(shards))],
            # Checked by every reader before it reads: a shard cut short, even at a record's end, is refused.
            "shard_bytes": [os.path.getsize(staging / name) for name in shards],
            "sequence_length": int(settings.sequence_length),
            "objective": objective,
            "next_sentence": objective == "nsp",
            "next_sentence_rate": float(settings.next_sentence_rate),
            "sentence_order_rate": float(settings.sentence_order_rate),
            "short_sequence_rate": float(settings.short_sequence_rate),
            "document_boundary": settings.document_boundary,
            "seed": int(settings.seed),
            "lowercase": bool(settings.lowercase),
            "corpus": source.files,
            "summary": source.summary(),
        }
        (staging / VOCABULARY_FILE).write_text("\n".join(tokenizer.get_vocabulary()) + "\n")
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
        # The old folder goes aside first and only then is deleted: a crash
        # between the renames leaves it whole, and the next preparation of
        # `output_dir` puts it back (`remove_interrupted_preparations`).
        earlier = None
        if output_dir.exists():
            earlier = Path(make_folder_beside(output_dir))
            os.replace(output_dir, earlier / output_dir.name)
        os.replace(staging, output_dir)
        if earlier is not None:
            _discard_replaced(earlier, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return metadata


def remove_interrupted_preparations(output_dir):
    """Cleans what killed preparations of `output_dir` left beside it; says what, one line each.

    A preparation writes its shards into a hidden folder beside
    `output_dir` (`.tmp-<8 hex>-<pid>@<host>-<name>`), renamed into place
    when complete; replacing a folder, it first moves the old one into such
    a folder. Of a preparation that no longer runs (its process has ended,
    or this process holds the lock of `output_dir`:
    `kbert.io.atomic_files.left_by_dead_writer`), the partial shards are
    removed, and an old folder moved aside is put back where `output_dir`
    is missing (the new one never arrived), else removed. A running
    preparation's folders are left alone.

    Returns:
        The lines, for the command to show.
    """
    output_dir = Path(output_dir)
    lines = []
    for path, _ in left_temporaries(str(output_dir.parent), [output_dir.name]):
        path = Path(path)
        if not path.is_dir() or path.is_symlink():
            continue
        kept = path / output_dir.name
        if kept.is_dir() and not os.path.lexists(output_dir):
            os.replace(kept, output_dir)
            lines.append(f"{output_dir}: a preparation that was replacing it was interrupted; the folder it "
                         "replaced is back in place.")
        elif kept.is_dir():
            # The folder a preparation replaced: its own files go, anything else in it stays (`_discard_replaced`).
            others = [name for name in os.listdir(kept) if not _own_file(kept / name)]
            if others:
                lines.append(f"{output_dir}: {kept} holds files that prepare-pretraining did not write "
                             f"({', '.join(sorted(others)[:3])}{', ...' if len(others) > 3 else ''}); it is left "
                             "for you to move or remove.")
                continue
            lines.append(f"{output_dir}: removed {path}, the folder that an interrupted preparation replaced.")
        else:
            lines.append(f"{output_dir}: removed {path}, the partial shards of an interrupted preparation.")
        shutil.rmtree(path, ignore_errors=True)
    return lines


def _own_file(path):
    """Whether `path` is a file of the kind prepare-pretraining writes into its folder."""
    name = path.name
    return (name in (METADATA_FILE, VOCABULARY_FILE) or _SHARD_NAME.fullmatch(name)) and path.is_file() \
        and not path.is_symlink()


def _check_replaceable(output_dir, corpus, vocabulary, overwrite):
    """Raises unless `overwrite` may replace `output_dir`: a prepared folder of its own regular files alone, none an input."""
    if not overwrite:
        raise FileExistsError(f"{output_dir} exists; pass overwrite=True to replace it.")
    if not output_dir.is_dir():
        raise NotADirectoryError(f"{output_dir} is a file, not a folder of prepared pretraining data.")
    metadata_file = output_dir / METADATA_FILE
    try:
        if special_file_kind(metadata_file) is not None:  # reading a named pipe would wait for a writer
            raise ValueError(f"{metadata_file} is {special_file_kind(metadata_file)}")
        metadata = read_metadata(output_dir)
    except (OSError, ValueError):
        raise ValueError(f"{output_dir} is not a folder of kbert pretraining data (no metadata.json of "
                         "kbert's), so it is not replaced; choose another output folder.") from None
    own = {METADATA_FILE, VOCABULARY_FILE, *metadata.get("shards", ())}
    for name in sorted(own):
        kind = special_file_kind(output_dir / name)
        if kind is not None:
            raise ValueError(f"{output_dir / name} is {kind}, not a file that prepare-pretraining wrote, so "
                             f"{output_dir} is not replaced; choose another output folder.")
    patterns = [os.fspath(p) for p in ([corpus] if isinstance(corpus, (str, os.PathLike)) else corpus)]
    inputs = patterns + corpus_files(patterns)
    if isinstance(vocabulary, (str, os.PathLike)):
        inputs.append(os.fspath(vocabulary))
    for path in inputs:
        if contains_path(output_dir, path) or contains_path(path, output_dir):
            raise ValueError(f"{output_dir} overlaps {path}, an input of this preparation (one is, or holds, "
                             "the other); choose another output folder.")
    foreign = sorted(name + ("/" if (output_dir / name).is_dir() else "")
                     for name in os.listdir(output_dir) if name not in own)
    if foreign:
        shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
        raise ValueError(f"{output_dir} holds what prepare-pretraining did not write ({shown}), and overwriting "
                         "replaces only its own folder; move them out of it, or choose another output folder.")


def _discard_replaced(earlier, output_dir):
    """Deletes the replaced folder, moved aside into `earlier`: its own files, and nothing of anyone else's.

    `_check_replaceable` refused a folder holding anything else before the
    preparation began; what appeared in it while it ran is moved into the
    new folder (where its name is free), or left in `earlier`, with a warning.
    """
    old = earlier / output_dir.name
    left = []
    for name in sorted(os.listdir(old)):
        path = old / name
        if (name in (METADATA_FILE, VOCABULARY_FILE) or _SHARD_NAME.fullmatch(name)) and not path.is_dir():
            os.remove(path)
        elif not os.path.lexists(output_dir / name):
            os.rename(path, output_dir / name)
        else:
            left.append(name)
    if left:
        import warnings

        warnings.warn(f"{output_dir}: {', '.join(left)} appeared in the folder it replaced while it ran, and "
                      f"the new folder has files by those names; they are in {old}.", stacklevel=3)
        return
    shutil.rmtree(earlier)
