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
    said_as_flags,
    take_setting_defaults,
    verbosity,
)

def add_commands(commands):
    _add_vocabulary(commands)
    _add_pretrain(commands)
    _add_prepare_pretraining(commands)
    _add_fill_mask(commands)


def _add_vocabulary(commands):
    vocabulary = add_command(commands, "vocabulary", "learn a WordPiece vocabulary from text files", _vocabulary,
                             check=_check_vocabulary, output_folders=folder_of_the_out_file)
    vocabulary.add_argument("files", nargs="+", help="text files or glob patterns, one text per line")
    vocabulary.add_argument("--size", type=positive_int, default=30522, help="tokens to learn")
    vocabulary.add_argument("--cased", action="store_true", help="keep case and accents")
    vocabulary.add_argument("--out", default="vocab.txt", help="the vocab.txt to write")
    vocabulary.add_argument("--overwrite", action="store_true", help="replace an existing --out file")


def _add_pretrain(commands):
    from kbert.runs.pretraining_run_settings import PretrainingRunSettings

    pretrain = add_command(commands, "pretrain", "pretrain BERT or ALBERT (masked LM + NSP or SOP) on raw text "
                                                 "files", _pretrain, check=_check_pretrain, lock=run_folder_lock,
                           interrupted="; run the same command again to resume from the last backup.")
    take_setting_defaults(pretrain, PretrainingRunSettings)
    pretrain.add_argument("--corpus", action="append", required=True,
                          help="text files, folders or glob patterns (repeatable), or one folder "
                               "written by `kbert prepare-pretraining`")
    pretrain.add_argument("--out", required=True,
                          help="run folder: vocab.txt, tensorboard/, checkpoints/, pretrainer.keras; "
                               "running the same command again resumes")
    pretrain.add_argument("--preset",
                          help="encoder size, BERT or ALBERT (see `kbert presets`)")
    pretrain.add_argument("--embedding-size", type=positive_int,
                          help="override the preset's embedding width E (ALBERT's factorized "
                               "embeddings when below the hidden size)")
    pretrain.add_argument("--num-groups", type=positive_int,
                          help="override the preset's groups of layers that share weights "
                               "(1: every layer shares one set, as ALBERT)")
    pretrain.add_argument("--vocabulary", help="vocab.txt to use (default: learn one from the corpus)")
    pretrain.add_argument("--vocabulary-size", type=positive_int,
                          help="tokens of the vocabulary learned when --vocabulary is not given")
    pretrain.add_argument("--cased", action="store_true", help="keep case and accents")
    pretrain.add_argument("--sequence-length", type=positive_int,
                          help="tokens per example, [CLS] and [SEP]s included (default: 128, or "
                               "the prepared folder's)")
    pretrain.add_argument("--batch-size", type=positive_int,
                          help="examples per step, across all replicas and workers")
    pretrain.add_argument("--gradient-accumulation-steps", type=positive_int,
                          help="update the weights every N steps with their mean gradient (N >= 2): "
                               "an effective batch N times --batch-size")
    pretrain.add_argument("--epochs", type=positive_int, help="epochs to train")
    pretrain.add_argument("--steps-per-epoch", type=positive_int,
                          help="steps per epoch (default: one pass over the corpus)")
    pretrain.add_argument("--learning-rate", type=positive_float,
                          help="peak learning rate (default: 1e-4 for BERT-base, more for "
                               "narrower encoders)")
    pretrain.add_argument("--mask-rate", type=open_fraction, help="share of tokens to predict")
    pretrain.add_argument("--objective", choices=("nsp", "sop", "none"),
                          help=OBJECTIVE_HELP + " (default: nsp, or the prepared folder's)")
    pretrain.add_argument("--no-next-sentence", action="store_const", dest="objective", const="none",
                          help="masked LM only: the same as --objective none")
    pretrain.add_argument("--whole-word-masking", action="store_true",
                          help="mask all pieces of a word together")
    pretrain.add_argument("--max-ngram", type=positive_int,
                          help="mask spans of up to this many whole words, shorter spans more "
                               "often (ALBERT's n-gram masking: 3); 1 masks tokens one by one")
    pretrain.add_argument("--document-boundary", choices=("file", "blank_line"),
                          help="what ends a document: each file is one, or blank lines end them")
    pretrain.add_argument("--backup-every", type=positive_int,
                          help="steps between backups (a killed run resumes from the last one)")
    pretrain.add_argument("--seed", type=int, help="fixes pairs, order, masks and weights")
    add_attention_dropout_argument(pretrain)
    add_quiet_argument(pretrain)
    add_strategy_arguments(pretrain)
    add_backend_argument(pretrain)


def _add_prepare_pretraining(commands):
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


def _add_fill_mask(commands):
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
    from kbert.preprocessing.tokenizer import SPECIAL_TOKENS
    from kbert.preprocessing.vocabulary import learn_vocabulary

    if args.size <= len(SPECIAL_TOKENS):
        raise ValueError(f"--size must exceed {len(SPECIAL_TOKENS)}, the special tokens; "
                         f"got {args.size}.")
    vocabulary = learn_vocabulary(files=args.files, vocabulary_size=args.size,
                                  lowercase=not args.cased)
    from kbert.runs.pretraining import write_lines_atomically

    write_lines_atomically(args.out, vocabulary)  # never a half-written vocabulary
    print(f"Wrote {len(vocabulary)} tokens to {args.out}")


def _pretrain(args):
    from kbert.runs.pretraining import pretrain
    from kbert.runs.pretraining_run_settings import PretrainingRunSettings

    settings = PretrainingRunSettings.from_flags(args, verbose=verbosity(args))

    def report(line):
        line = said_as_flags(line)
        print(f"kbert pretrain: {line}" if line.startswith("note: ") else line, file=sys.stderr, flush=True)

    pretrain(args.corpus, args.out, settings, report=report)
    print(f"Saved {os.path.join(args.out, 'pretrainer.keras')} (encoder and heads) and "
          f"{os.path.join(args.out, 'vocab.txt')}.\nTry: kbert fill-mask {args.out} \"the king [MASK] the crown.\"")


def _prepare_pretraining(args):
    from kbert.preprocessing.tokenizer import read_vocabulary
    from kbert.pretraining.dataset import prepare_pretraining_data
    from kbert.pretraining.prepared_pairs import remove_interrupted_preparations

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
    from kbert.checkpoints.encoder_argument import resolve_pretrainer
    from kbert.pretraining.fill_mask import fill_mask

    model, tokenizer = resolve_pretrainer(args.model, args.vocabulary, lowercase=not args.cased,
                                         require_tokenizer=True)
    _print_fills(fill_mask(model, tokenizer=tokenizer, top_k=args.top_k), args.texts)


def _print_fills(fill, texts):
    for text in texts:
        print(text)
        for number, candidates in enumerate(fill(text), start=1):
            shown = "  ".join(f"{c['token']} {c['score']:.3f}" for c in candidates)
            print(f"  [MASK] {number}: {shown}")
