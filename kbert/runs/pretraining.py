"""Pretraining runs: what `kbert pretrain` runs, from raw text to a pretrained encoder and its heads."""

import os
import sys

from kbert.runs.pretraining_run_settings import PretrainingRunSettings

# Sentences whose [MASK] guesses a pretraining run shows in TensorBoard's Text tab.
PRETRAIN_FILL_MASK_SENTENCES = (
    "paris is the [MASK] of france .",
    "he went to the [MASK] to buy some bread .",
    "she was very [MASK] to see him again .",
)


def _read_or_learn_vocabulary(settings, out_dir, prepared=None, lowercase=True, corpus=None):
    """The run's vocabulary: `settings.vocabulary`, or the run folder's, or the prepared folder's, or learned.

    Learned from `corpus` (default `settings.corpus`) at `settings.vocabulary_size`.
    """
    from kbert.preprocessing.tokenizer import read_vocabulary
    from kbert.preprocessing.vocabulary import learn_vocabulary

    saved = out_dir / "vocab.txt"
    if settings.vocabulary:  # its casing checked here, so that the error names the file
        return read_vocabulary(settings.vocabulary, lowercase=lowercase)
    if saved.exists():  # a resumed run keeps its vocabulary
        return read_vocabulary(str(saved), lowercase=lowercase)
    if prepared is not None:
        return read_vocabulary(os.path.join(prepared, "vocab.txt"))
    from kbert.pretraining.documents import corpus_files

    # The files the run reads: a folder's too, as the corpus names them.
    corpus = settings.corpus if corpus is None else corpus
    return learn_vocabulary(files=corpus_files(corpus), vocabulary_size=settings.vocabulary_size,
                            lowercase=not settings.cased)


def write_lines_atomically(path, lines):
    """Writes `lines` to the text file `path`, one a line, all or nothing (never a half-written vocabulary)."""
    from kbert.io.atomic_files import write_atomically

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    write_atomically(str(path), write)


def pretrain(corpus, out, settings=None, report=None, **options):
    """Pretrains an encoder with its masked-LM (and NSP or SOP) heads on raw text: what `kbert pretrain` runs.

    Running it again on the same `out` resumes from the last backup, or
    finds the run finished; it must be the same run (`check_same_run`:
    the settings that define it, the corpus and the vocabulary, recorded in
    `out/settings.json` after the first batch).

    Args:
        corpus: text files, folders or glob patterns, or one folder written
            by `kbert prepare-pretraining`.
        out: the run folder: vocab.txt, settings.json, tensorboard/,
            checkpoints/, backup/, and pretrainer.keras at the end.
        settings: a `PretrainingRunSettings`; or its fields as keyword
            `options`.
        report: takes each line worth saying on the way (a note, a file
            removed), its settings named in backticks; default: printed to
            stderr.

    Returns:
        The `kbert.Pretrainer`, fitted.
    """
    from pathlib import Path

    import keras

    from kbert.backend.distribute import is_chief, write_on_chief
    from kbert.callbacks import standard
    from kbert.callbacks.backup_and_restore import BackupAndRestore
    from kbert.callbacks.fill_mask_logger import FillMaskLogger
    from kbert.io.atomic_files import remove_temporary_files
    from kbert.models.encoder import Encoder
    from kbert.pretraining.dataset import prepared_folder, read_metadata
    from kbert.pretraining.dataset import pretraining_dataset
    from kbert.pretraining.pretrainer import Pretrainer
    from kbert.runs.pretraining_run import SETTINGS_FILE, check_same_run, corpus_identity, read_record, record_run

    settings = PretrainingRunSettings.from_arguments(settings, **options)
    report = report or (lambda line: print(line, file=sys.stderr, flush=True))
    corpus = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    out_dir = Path(out)
    # Segment pairs written by `kbert prepare-pretraining`, or text files.
    prepared = prepared_folder(corpus)
    metadata = read_metadata(prepared) if prepared else None
    lowercase = metadata["lowercase"] if prepared else not settings.cased
    out_dir.mkdir(parents=True, exist_ok=True)
    # The chief's alone: another worker may be writing its vocab.txt beside it.
    own_files = ("pretrainer.keras", "vocab.txt", SETTINGS_FILE)
    for path in remove_temporary_files(out_dir, own_files) if is_chief() else ():
        report(f"{out_dir}: removed {path}, a partial file of an earlier run that was interrupted.")
    # A resume (or a run again) is the same run: checked before anything is read or learned.
    defining = _defining_settings(settings, metadata, lowercase)
    recorded = read_record(str(out_dir)) is not None
    note = check_same_run(str(out_dir), defining, lambda: corpus_identity(corpus, prepared), settings.vocabulary)
    if note:
        report(f"note: {note}")
    BackupAndRestore(str(out_dir / "backup")).peek()  # a broken backup record, refused at once
    vocabulary = _read_or_learn_vocabulary(settings, out_dir, prepared, lowercase, corpus)
    sequence_length = settings.sequence_length
    if sequence_length is None and prepared is None:
        sequence_length = 128
    data = pretraining_dataset(
        prepared or corpus, vocabulary=vocabulary, sequence_length=sequence_length,
        batch_size=settings.batch_size, mask_rate=settings.mask_rate, objective=settings.objective,
        whole_word_masking=settings.whole_word_masking, max_ngram=settings.max_ngram,
        document_boundary=settings.document_boundary, seed=settings.seed, lowercase=lowercase,
    )
    sequence_length = data.element_spec[0]["token_ids"].shape[1]
    _say_how_often_examples_repeat(data.num_examples, settings.steps_per_epoch, settings.batch_size, report)
    keras.utils.set_random_seed(settings.seed)
    encoder = Encoder.from_preset(
        settings.preset, vocabulary_size=len(vocabulary),
        max_sequence_length=max(512, sequence_length), **_preset_overrides(settings),
    )
    pretrainer = Pretrainer(encoder, objective=data.objective)
    pretrainer.compile(learning_rate=settings.learning_rate,
                       gradient_accumulation_steps=settings.gradient_accumulation_steps)
    # No `.repeat()` for steps_per_epoch: `Pretrainer.fit` streams the passes
    # itself, which is what lets a resumed run continue at the exact batch.
    callbacks = standard(str(out_dir), save_freq=settings.backup_every)
    if not recorded and is_chief():
        # First, so that its first batch's backup follows the record.
        callbacks.insert(0, _run_files_writer(out_dir, vocabulary, lambda: record_run(
            str(out_dir), defining, corpus_identity(corpus, prepared))))
    callbacks.append(FillMaskLogger(
        str(out_dir / "tensorboard"), PRETRAIN_FILL_MASK_SENTENCES, vocabulary, lowercase=lowercase, every=100,
    ))
    try:
        pretrainer.fit(data, epochs=settings.epochs, steps_per_epoch=settings.steps_per_epoch,
                       callbacks=callbacks, verbose=settings.verbose)
    except Exception as error:
        _name_an_unreadable_shard(error, prepared)
        raise
    write_on_chief(str(out_dir / "pretrainer.keras"), pretrainer.save)  # the other workers' copies are removed
    return pretrainer


def _preset_overrides(settings):
    return {name: getattr(settings, name) for name in ("embedding_size", "num_groups", "attention_dropout")
            if getattr(settings, name) is not None}


def _run_files_writer(out_dir, vocabulary, record):
    """A callback that writes the run folder's vocab.txt (where missing) and its record once the first batch is trained.

    Not before: a command that fails first (a corpus it cannot read, a
    backup of an earlier kbert that does not fit this model) leaves the
    folder as it found it, free for the run it was meant for.
    """
    import keras

    written = []

    def write(batch, logs=None):
        if written:
            return
        written.append(True)
        if not (out_dir / "vocab.txt").exists():
            write_lines_atomically(out_dir / "vocab.txt", vocabulary)
        record()

    return keras.callbacks.LambdaCallback(on_train_batch_end=write)


def _name_an_unreadable_shard(error, prepared):
    """Raises the one line naming the prepared corpus' shard that `error`, a failed read, met (TensorFlow's names none)."""
    import tensorflow as tf

    if prepared is None or not isinstance(error, tf.errors.OpError):
        return
    from kbert.pretraining.prepared_pairs import unreadable_shard

    line = unreadable_shard(prepared)
    if line is not None:
        raise ValueError(line) from error


def _defining_settings(settings, metadata, lowercase):
    """The settings that define this run (`kbert.runs.pretraining_run.DEFINING`), defaults resolved as the run does."""
    from kbert.models.presets import preset_config
    from kbert.pretraining.prepared_pairs import prepared_objective
    from kbert.pretraining.pretrainer import default_pretraining_learning_rate
    from kbert.pretraining.pretraining_settings import DEFAULT_SEQUENCE_LENGTH

    encoder = preset_config(settings.preset)
    encoder.update(_preset_overrides(settings))
    prepared = metadata is not None
    return {
        "preset": settings.preset,
        "embedding_size": encoder.get("embedding_size"),
        "num_groups": encoder.get("num_groups"),
        "attention_dropout": encoder.get("attention_dropout"),
        "objective": settings.objective or (prepared_objective(metadata) if prepared else "nsp"),
        "sequence_length": settings.sequence_length or (metadata["sequence_length"] if prepared
                                                        else DEFAULT_SEQUENCE_LENGTH),
        "lowercase": bool(lowercase),
        # Where the run learned its vocabulary; a prepared corpus' is its own.
        "vocabulary_size": None if prepared or settings.vocabulary else settings.vocabulary_size,
        "batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.gradient_accumulation_steps,
        "epochs": settings.epochs,
        "steps_per_epoch": settings.steps_per_epoch,
        "learning_rate": settings.learning_rate or default_pretraining_learning_rate(encoder["hidden_dim"]),
        "mask_rate": settings.mask_rate,
        "whole_word_masking": bool(settings.whole_word_masking),
        "max_ngram": settings.max_ngram,
        "document_boundary": None if prepared else settings.document_boundary,  # a prepared corpus' is its own
        "seed": settings.seed,
    }


def _say_how_often_examples_repeat(examples, steps_per_epoch, batch_size, report):
    """One line when `steps_per_epoch` reads the corpus' examples more than once an epoch."""
    if not examples or not steps_per_epoch or steps_per_epoch * batch_size <= examples:
        return
    read = steps_per_epoch * batch_size
    report(f"note: the corpus gives {examples:,} examples, and an epoch of `steps_per_epoch` {steps_per_epoch} "
           f"at `batch_size` {batch_size} reads {read:,}: each example is read about {read / examples:.1f} "
           "times an epoch.")
