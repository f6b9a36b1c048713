"""`kbert vocabulary`, `prepare-pretraining`, `pretrain` and `fill-mask`: a BERT of one's own, from raw text."""

import os
import sys

from kbert.cli.arguments import (
    OBJECTIVE_HELP,
    add_attention_dropout_argument,
    add_backend_argument,
    add_command,
    add_quiet_argument,
    add_strategy_arguments,
    folder_of_the_out_file,
    open_fraction,
    positive_float,
    positive_int,
    replaced_output_lock,
    run_folder_lock,
    verbosity,
)

# Sentences whose [MASK] guesses `kbert pretrain` shows in TensorBoard's Text tab.


PRETRAIN_FILL_MASK_SENTENCES = (
    "paris is the [MASK] of france .",
    "he went to the [MASK] to buy some bread .",
    "she was very [MASK] to see him again .",
)


def add_commands(commands):
    vocabulary = add_command(commands, "vocabulary", "learn a WordPiece vocabulary from text files", _vocabulary,
                             check=_check_vocabulary, output_folders=folder_of_the_out_file)
    vocabulary.add_argument("files", nargs="+", help="text files or glob patterns, one text per line")
    vocabulary.add_argument("--size", type=positive_int, default=30522, help="tokens to learn")
    vocabulary.add_argument("--cased", action="store_true", help="keep case and accents")
    vocabulary.add_argument("--out", default="vocab.txt", help="the vocab.txt to write")
    vocabulary.add_argument("--overwrite", action="store_true", help="replace an existing --out file")

    pretrain = add_command(commands, "pretrain", "pretrain BERT or ALBERT (masked LM + NSP or SOP) on raw text "
                                                 "files", _pretrain, check=_check_pretrain, lock=run_folder_lock,
                           interrupted="; run the same command again to resume from the last backup.")
    pretrain.add_argument("--corpus", action="append", required=True,
                          help="text files, folders or glob patterns (repeatable), or one folder "
                               "written by `kbert prepare-pretraining`")
    pretrain.add_argument("--out", required=True,
                          help="run folder: vocab.txt, tensorboard/, checkpoints/, pretrainer.keras; "
                               "running the same command again resumes")
    pretrain.add_argument("--preset", default="mini",
                          help="encoder size, BERT or ALBERT (see `kbert presets`)")
    pretrain.add_argument("--embedding-size", type=positive_int, default=None,
                          help="override the preset's embedding width E (ALBERT's factorized "
                               "embeddings when below the hidden size)")
    pretrain.add_argument("--num-groups", type=positive_int, default=None,
                          help="override the preset's groups of layers that share weights "
                               "(1: every layer shares one set, as ALBERT)")
    pretrain.add_argument("--vocabulary", help="vocab.txt to use (default: learn one from the corpus)")
    pretrain.add_argument("--vocabulary-size", type=positive_int, default=30522,
                          help="tokens of the vocabulary learned when --vocabulary is not given")
    pretrain.add_argument("--cased", action="store_true", help="keep case and accents")
    pretrain.add_argument("--sequence-length", type=positive_int, default=None,
                          help="tokens per example, [CLS] and [SEP]s included (default: 128, or "
                               "the prepared folder's)")
    pretrain.add_argument("--batch-size", type=positive_int, default=32,
                          help="examples per step, across all replicas and workers")
    pretrain.add_argument("--gradient-accumulation-steps", type=positive_int, default=None,
                          help="update the weights every N steps with their mean gradient (N >= 2): "
                               "an effective batch N times --batch-size")
    pretrain.add_argument("--epochs", type=positive_int, default=1, help="epochs to train")
    pretrain.add_argument("--steps-per-epoch", type=positive_int, default=None,
                          help="steps per epoch (default: one pass over the corpus)")
    pretrain.add_argument("--learning-rate", type=positive_float, default=None,
                          help="peak learning rate (default: 1e-4 for BERT-base, more for "
                               "narrower encoders)")
    pretrain.add_argument("--mask-rate", type=open_fraction, default=0.15, help="share of tokens to predict")
    pretrain.add_argument("--objective", choices=("nsp", "sop", "none"), default=None,
                          help=OBJECTIVE_HELP + " (default: nsp, or the prepared folder's)")
    pretrain.add_argument("--no-next-sentence", action="store_const", dest="objective", const="none",
                          help="masked LM only: the same as --objective none")
    pretrain.add_argument("--whole-word-masking", action="store_true",
                          help="mask all pieces of a word together")
    pretrain.add_argument("--max-ngram", type=positive_int, default=1,
                          help="mask spans of up to this many whole words, shorter spans more "
                               "often (ALBERT's n-gram masking: 3); 1 masks tokens one by one")
    pretrain.add_argument("--document-boundary", choices=("file", "blank_line"), default="file",
                          help="what ends a document: each file is one, or blank lines end them")
    pretrain.add_argument("--backup-every", type=positive_int, default=500,
                          help="steps between backups (a killed run resumes from the last one)")
    pretrain.add_argument("--seed", type=int, default=0, help="fixes pairs, order, masks and weights")
    add_attention_dropout_argument(pretrain)
    add_quiet_argument(pretrain)
    add_strategy_arguments(pretrain)
    add_backend_argument(pretrain)

    prepare = add_command(commands, "prepare-pretraining", "write a corpus' segment pairs to sharded TFRecords",
                          _prepare_pretraining, check=_check_prepare_pretraining, lock=replaced_output_lock)
    prepare.add_argument("--corpus", action="append", required=True,
                         help="text files, folders or glob patterns (repeatable)")
    prepare.add_argument("--vocabulary", required=True, help="the vocab.txt to tokenize with")
    prepare.add_argument("--out", required=True,
                         help="the folder to write (it must not exist, or be one this command wrote, "
                              "with --overwrite)")
    prepare.add_argument("--cased", action="store_true", help="keep case and accents")
    prepare.add_argument("--sequence-length", type=positive_int, default=128,
                         help="tokens per example, [CLS] and [SEP]s included")
    prepare.add_argument("--objective", choices=("nsp", "sop", "none"), default="nsp",
                         help=OBJECTIVE_HELP + "; the pairs are made for it, and pretraining on "
                              "them must use the same")
    prepare.add_argument("--no-next-sentence", action="store_const", dest="objective", const="none",
                         help="single segments for masked LM only: the same as --objective none")
    prepare.add_argument("--document-boundary", choices=("file", "blank_line"), default="file",
                         help="what ends a document: each file is one, or blank lines end them")
    prepare.add_argument("--examples-per-shard", type=positive_int, default=100_000,
                         help="segment pairs per TFRecord file")
    prepare.add_argument("--seed", type=int, default=0, help="fixes the pairs")
    prepare.add_argument("--overwrite", action="store_true",
                         help="replace an --out folder that prepare-pretraining wrote")

    fill_mask = add_command(commands, "fill-mask", "top tokens for each [MASK] in a text", _fill_mask)
    fill_mask.add_argument("model", help="a pretraining run folder, a pretrainer .keras file, or a "
                                         "BERT checkpoint with its masked-LM head (folder or name)")
    fill_mask.add_argument("texts", nargs="+", help="texts with one or more [MASK]")
    fill_mask.add_argument("--vocabulary",
                           help="vocab.txt for a .keras file (default: the run folder's)")
    fill_mask.add_argument("--top-k", type=positive_int, default=5, help="tokens shown per [MASK]")
    fill_mask.add_argument("--cased", action="store_true",
                           help="keep case and accents: the vocabulary is cased (pretrain --cased)")
    add_backend_argument(fill_mask)


def _check_vocabulary(args):
    import glob

    from kbert.runs.outputs import check_output_file

    inputs = [path for pattern in args.files for path in glob.glob(pattern)] + args.files
    check_output_file(args.out, "--out", args.overwrite, inputs)


def _check_pretrain(args):
    from kbert.runs.outputs import check_output_folder, check_own_files

    check_output_folder(args.out, "--out")
    # A resumed run reads its vocab.txt and settings.json.
    check_own_files(args.out, ("vocab.txt", "settings.json", "pretrainer.keras"), "--out")


def _check_prepare_pretraining(args):
    import glob

    from kbert.runs.outputs import check_output_folder

    inputs = [path for pattern in args.corpus for path in glob.glob(pattern)] + args.corpus
    check_output_folder(args.out, "--out", inputs + [args.vocabulary])


def _vocabulary(args):
    import kbert

    if args.size <= len(kbert.SPECIAL_TOKENS):
        raise ValueError(f"--size must exceed {len(kbert.SPECIAL_TOKENS)}, the special tokens; "
                         f"got {args.size}.")
    vocabulary = kbert.learn_vocabulary(files=args.files, vocabulary_size=args.size,
                                        lowercase=not args.cased)
    _write_lines_atomically(args.out, vocabulary)  # never a half-written vocabulary
    print(f"Wrote {len(vocabulary)} tokens to {args.out}")


def _read_or_learn_vocabulary(args, out_dir, prepared=None, lowercase=True):
    """The run's vocabulary: --vocabulary, or the run folder's, or the prepared folder's, or learned from the corpus."""
    import kbert
    from kbert.preprocessing.tokenizer import read_vocabulary

    saved = out_dir / "vocab.txt"
    if args.vocabulary:  # its casing checked here, so that the error names the file
        return read_vocabulary(args.vocabulary, lowercase=lowercase)
    if saved.exists():  # a resumed run keeps its vocabulary
        return read_vocabulary(str(saved), lowercase=lowercase)
    if prepared is not None:
        return read_vocabulary(os.path.join(prepared, "vocab.txt"))
    from kbert.data.documents import corpus_files

    # The files the run reads: a folder's too, as --corpus says.
    return kbert.learn_vocabulary(files=corpus_files(args.corpus), vocabulary_size=args.vocabulary_size,
                                  lowercase=not args.cased)


def _write_lines_atomically(path, lines):
    from kbert.io.atomic_files import write_atomically

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    write_atomically(str(path), write)


def _pretrain(args):
    from pathlib import Path

    import keras

    import kbert
    from kbert.backend.distribute import is_chief, write_on_chief
    from kbert.data.pretraining import prepared_folder, read_metadata
    from kbert.io.atomic_files import remove_temporary_files
    from kbert.runs.pretraining_run import SETTINGS_FILE, check_same_run, corpus_identity, read_record, record_run

    out_dir = Path(args.out)
    # Segment pairs written by `kbert prepare-pretraining`, or text files.
    prepared = prepared_folder(args.corpus)
    metadata = read_metadata(prepared) if prepared else None
    lowercase = metadata["lowercase"] if prepared else not args.cased
    out_dir.mkdir(parents=True, exist_ok=True)
    # The chief's alone: another worker may be writing its vocab.txt beside it.
    own_files = ("pretrainer.keras", "vocab.txt", SETTINGS_FILE)
    for path in remove_temporary_files(out_dir, own_files) if is_chief() else ():
        print(f"{out_dir}: removed {path}, a partial file of an earlier run that was interrupted.",
              file=sys.stderr)
    # A resume (or a run again) is the same run: checked before anything is read or learned.
    settings = _run_settings(args, metadata, lowercase)
    recorded = read_record(str(out_dir)) is not None
    note = check_same_run(str(out_dir), settings, lambda: corpus_identity(args.corpus, prepared), args.vocabulary)
    if note:
        print(f"kbert pretrain: note: {note}", file=sys.stderr, flush=True)
    kbert.callbacks.BackupAndRestore(str(out_dir / "backup")).peek()  # a broken backup record, refused at once
    vocabulary = _read_or_learn_vocabulary(args, out_dir, prepared, lowercase)
    sequence_length = args.sequence_length
    if sequence_length is None and prepared is None:
        sequence_length = 128
    data = kbert.pretraining_dataset(
        prepared or args.corpus, vocabulary=vocabulary, sequence_length=sequence_length,
        batch_size=args.batch_size, mask_rate=args.mask_rate, objective=args.objective,
        whole_word_masking=args.whole_word_masking, max_ngram=args.max_ngram,
        document_boundary=args.document_boundary, seed=args.seed, lowercase=lowercase,
    )
    sequence_length = data.element_spec[0]["token_ids"].shape[1]
    _say_how_often_examples_repeat(data.num_examples, args.steps_per_epoch, args.batch_size)
    keras.utils.set_random_seed(args.seed)
    overrides = {name: getattr(args, name) for name in ("embedding_size", "num_groups", "attention_dropout")
                 if getattr(args, name) is not None}
    encoder = kbert.Encoder.from_preset(
        args.preset, vocabulary_size=len(vocabulary),
        max_sequence_length=max(512, sequence_length), **overrides,
    )
    pretrainer = kbert.Pretrainer(encoder, objective=data.objective)
    pretrainer.compile(learning_rate=args.learning_rate,
                       gradient_accumulation_steps=args.gradient_accumulation_steps)
    # No `.repeat()` for --steps-per-epoch: `Pretrainer.fit` streams the passes
    # itself, which is what lets a resumed run continue at the exact batch.
    callbacks = kbert.callbacks.standard(str(out_dir), save_freq=args.backup_every)
    if not recorded and is_chief():
        # First, so that its first batch's backup follows the record.
        callbacks.insert(0, _run_files_writer(out_dir, vocabulary, lambda: record_run(
            str(out_dir), settings, corpus_identity(args.corpus, prepared))))
    callbacks.append(kbert.callbacks.FillMaskLogger(
        str(out_dir / "tensorboard"), PRETRAIN_FILL_MASK_SENTENCES, vocabulary, lowercase=lowercase,
        every=100,
    ))
    try:
        pretrainer.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
                       verbose=verbosity(args))
    except Exception as error:
        _name_an_unreadable_shard(error, prepared)
        raise
    model_path = out_dir / "pretrainer.keras"
    write_on_chief(str(model_path), pretrainer.save)  # the other workers' copies are removed
    print(f"Saved {model_path} (encoder and heads) and {out_dir / 'vocab.txt'}.\n"
          f"Try: kbert fill-mask {out_dir} \"the king [MASK] the crown.\"")


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
            _write_lines_atomically(out_dir / "vocab.txt", vocabulary)
        record()

    return keras.callbacks.LambdaCallback(on_train_batch_end=write)


def _name_an_unreadable_shard(error, prepared):
    """Raises the one line naming the prepared corpus' shard that `error`, a failed read, met (TensorFlow's names none)."""
    import tensorflow as tf

    if prepared is None or not isinstance(error, tf.errors.OpError):
        return
    from kbert.data.prepared_pairs import unreadable_shard

    line = unreadable_shard(prepared)
    if line is not None:
        raise ValueError(line) from error


def _run_settings(args, metadata, lowercase):
    """The settings that define this run (`kbert.runs.pretraining_run.DEFINING`), defaults resolved as the run does."""
    from kbert.data.prepared_pairs import prepared_objective
    from kbert.data.pretraining_settings import DEFAULT_SEQUENCE_LENGTH
    from kbert.models.presets import preset_config
    from kbert.models.pretrainer import default_pretraining_learning_rate

    encoder = preset_config(args.preset)
    encoder.update({name: getattr(args, name) for name in ("embedding_size", "num_groups", "attention_dropout")
                    if getattr(args, name) is not None})
    prepared = metadata is not None
    return {
        "preset": args.preset,
        "embedding_size": encoder.get("embedding_size"),
        "num_groups": encoder.get("num_groups"),
        "attention_dropout": encoder.get("attention_dropout"),
        "objective": args.objective or (prepared_objective(metadata) if prepared else "nsp"),
        "sequence_length": args.sequence_length or (metadata["sequence_length"] if prepared
                                                    else DEFAULT_SEQUENCE_LENGTH),
        "lowercase": bool(lowercase),
        # Where the run learned its vocabulary; a prepared corpus' is its own.
        "vocabulary_size": None if prepared or args.vocabulary else args.vocabulary_size,
        "batch_size": args.batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch,
        "learning_rate": args.learning_rate or default_pretraining_learning_rate(encoder["hidden_dim"]),
        "mask_rate": args.mask_rate,
        "whole_word_masking": bool(args.whole_word_masking),
        "max_ngram": args.max_ngram,
        "document_boundary": None if prepared else args.document_boundary,  # a prepared corpus' is its own
        "seed": args.seed,
    }


def _say_how_often_examples_repeat(examples, steps_per_epoch, batch_size):
    """One line when --steps-per-epoch reads the corpus' examples more than once an epoch."""
    if not examples or not steps_per_epoch or steps_per_epoch * batch_size <= examples:
        return
    read = steps_per_epoch * batch_size
    print(f"kbert pretrain: note: the corpus gives {examples:,} examples, and an epoch of "
          f"--steps-per-epoch {steps_per_epoch} at --batch-size {batch_size} reads {read:,}: each "
          f"example is read about {read / examples:.1f} times an epoch.", file=sys.stderr, flush=True)


def _prepare_pretraining(args):
    from kbert.data.prepared_pairs import remove_interrupted_preparations
    from kbert.data.pretraining import prepare_pretraining_data
    from kbert.preprocessing.tokenizer import read_vocabulary

    for line in remove_interrupted_preparations(args.out):  # under --out's lock: every one left is a dead writer's
        print(line, file=sys.stderr, flush=True)
    # Checked here, before the corpus is read, and in the command's words
    # (the library's message names its `overwrite=True`).
    if os.path.exists(args.out) and not args.overwrite:
        raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it.")
    metadata = prepare_pretraining_data(
        args.corpus, args.out, vocabulary=read_vocabulary(args.vocabulary, lowercase=not args.cased),
        sequence_length=args.sequence_length, objective=args.objective,
        document_boundary=args.document_boundary, seed=args.seed, lowercase=not args.cased,
        examples_per_shard=args.examples_per_shard, overwrite=args.overwrite,
    )
    print(f"Wrote {metadata['num_examples']:,} segment pairs in {len(metadata['shards'])} shard(s) "
          f"to {args.out}; read them with kbert.pretraining_dataset({args.out!r}, seed={args.seed}).")


def _fill_mask(args):
    import kbert
    from kbert.checkpoints.encoder_argument import resolve_encoder

    model, tokenizer = resolve_encoder(args.model, args.vocabulary, lowercase=not args.cased, heads=True,
                                       require_tokenizer=True)
    _print_fills(kbert.fill_mask(model, tokenizer=tokenizer, top_k=args.top_k), args.texts)


def _print_fills(fill, texts):
    for text in texts:
        print(text)
        for number, candidates in enumerate(fill(text), start=1):
            shown = "  ".join(f"{c['token']} {c['score']:.3f}" for c in candidates)
            print(f"  [MASK] {number}: {shown}")
