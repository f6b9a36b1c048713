"""The `kbert` command line."""

import argparse
import math
import os
import sys


def _demo(args):
    from kbert import demo

    demo.run(preset=args.preset, epochs=args.epochs, sequence_length=args.sequence_length,
             learning_rate=args.learning_rate, pretraining_steps=args.pretraining_steps,
             export_dir=args.export_dir, verbose=_verbosity(args))


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
    return kbert.learn_vocabulary(files=args.corpus, vocabulary_size=args.vocabulary_size,
                                  lowercase=not args.cased)


def _verbosity(args):
    """Keras' `verbose` for a command's `fit`: a progress bar on a terminal, else one plain line per epoch.

    Keras draws its bar with escape codes and carriage returns, which fill
    a log file or a pipe with control characters.
    """
    return 1 if sys.stdout.isatty() and not args.quiet else 2


def _write_lines_atomically(path, lines):
    from kbert.atomic_files import write_atomically

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    write_atomically(str(path), write)


# Sentences whose [MASK] guesses `kbert pretrain` shows in TensorBoard's Text tab.
PRETRAIN_FILL_MASK_SENTENCES = (
    "paris is the [MASK] of france .",
    "he went to the [MASK] to buy some bread .",
    "she was very [MASK] to see him again .",
)


def _pretrain(args):
    from pathlib import Path

    import keras

    import kbert
    from kbert.atomic_files import remove_temporary_files
    from kbert.data.pretraining import prepared_folder, read_metadata
    from kbert.distribute import is_chief, write_on_chief

    out_dir = Path(args.out)
    # Segment pairs written by `kbert prepare-pretraining`, or text files.
    prepared = prepared_folder(args.corpus)
    lowercase = read_metadata(prepared)["lowercase"] if prepared else not args.cased
    out_dir.mkdir(parents=True, exist_ok=True)
    # The chief's alone: another worker may be writing its vocab.txt beside it.
    for path in remove_temporary_files(out_dir, ("pretrainer.keras",)) if is_chief() else ():
        print(f"{out_dir}: removed {path}, a partial file of an earlier run that was interrupted.",
              file=sys.stderr)
    vocabulary = _read_or_learn_vocabulary(args, out_dir, prepared, lowercase)
    if not (out_dir / "vocab.txt").exists():
        _write_lines_atomically(out_dir / "vocab.txt", vocabulary)
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
    _say_how_often_examples_repeat(data.kbert_num_examples, args.steps_per_epoch, args.batch_size)
    keras.utils.set_random_seed(args.seed)
    overrides = {name: getattr(args, name) for name in ("embedding_size", "num_groups", "attention_dropout")
                 if getattr(args, name) is not None}
    encoder = kbert.Encoder.from_preset(
        args.preset, vocabulary_size=len(vocabulary),
        max_sequence_length=max(512, sequence_length), **overrides,
    )
    pretrainer = kbert.Pretrainer(encoder, objective=data.kbert_objective)
    pretrainer.compile(learning_rate=args.learning_rate,
                       gradient_accumulation_steps=args.gradient_accumulation_steps)
    # No `.repeat()` for --steps-per-epoch: `Pretrainer.fit` streams the passes
    # itself, which is what lets a resumed run continue at the exact batch.
    callbacks = kbert.callbacks.standard(str(out_dir), save_freq=args.backup_every)
    callbacks.append(kbert.callbacks.FillMaskLogger(
        str(out_dir / "tensorboard"), PRETRAIN_FILL_MASK_SENTENCES, vocabulary, lowercase=lowercase,
        every=100,
    ))
    pretrainer.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
                   verbose=_verbosity(args))
    model_path = out_dir / "pretrainer.keras"
    write_on_chief(str(model_path), pretrainer.save)  # the other workers' copies are removed
    print(f"Saved {model_path} (encoder and heads) and {out_dir / 'vocab.txt'}.\n"
          f"Try: kbert fill-mask {out_dir} \"the king [MASK] the crown.\"")


def _say_how_often_examples_repeat(examples, steps_per_epoch, batch_size):
    """One line when --steps-per-epoch reads the corpus' examples more than once an epoch."""
    if not examples or not steps_per_epoch or steps_per_epoch * batch_size <= examples:
        return
    read = steps_per_epoch * batch_size
    print(f"kbert pretrain: note: the corpus gives {examples:,} examples, and an epoch of "
          f"--steps-per-epoch {steps_per_epoch} at --batch-size {batch_size} reads {read:,}: each "
          f"example is read about {read / examples:.1f} times an epoch.", file=sys.stderr, flush=True)


def _strategy_scope(args):
    """The scope of the `--strategy` a command was given; no scope for the others."""
    import contextlib

    if getattr(args, "strategy", "absent") == "absent":
        return contextlib.nullcontext()
    from kbert.distribute import make_strategy

    return make_strategy(args.strategy, connect_timeout=args.connect_timeout).scope()


def _add_strategy_arguments(command):
    from kbert.distribute import DEFAULT_CONNECT_TIMEOUT, STRATEGIES

    command.add_argument("--strategy", choices=STRATEGIES, default=None,
                         help="where to train: default (one device), mirrored (this machine's "
                              "GPUs), multi-worker (the workers of TF_CONFIG), tpu (TPUStrategy; "
                              "default: multi-worker when TF_CONFIG is set, else default); on "
                              "--backend jax, mirrored and tpu split each batch over this "
                              "machine's devices (keras.distribution.DataParallel)")
    command.add_argument("--connect-timeout", type=_positive_float, default=DEFAULT_CONNECT_TIMEOUT,
                         help="seconds a multi-worker run waits for the other workers to start")


def _prepare_pretraining(args):
    from kbert.data.pretraining import prepare_pretraining_data
    from kbert.preprocessing.tokenizer import read_vocabulary

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
    from pathlib import Path

    import kbert

    model_path, vocabulary = Path(args.model), args.vocabulary
    if not model_path.exists() or (model_path.is_dir() and not (model_path / "pretrainer.keras").exists()):
        # A published checkpoint with its masked-LM head (folder or known name).
        model, tokenizer = kbert.load_pretrained(args.model, heads=True)
        _print_fills(kbert.fill_mask(model, tokenizer=tokenizer, top_k=args.top_k), args.texts)
        return
    if model_path.is_dir():
        vocabulary = vocabulary or str(model_path / "vocab.txt")
        model_path = model_path / "pretrainer.keras"
    if vocabulary is None:
        raise ValueError("Pass --vocabulary (the model file's folder has no vocab.txt).")
    if not model_path.exists():
        raise FileNotFoundError(f"No model at {model_path}.")
    fill = kbert.fill_mask(kbert.load_model(str(model_path)), vocabulary=vocabulary,
                           top_k=args.top_k, lowercase=not args.cased)
    _print_fills(fill, args.texts)


def _print_fills(fill, texts):
    for text in texts:
        print(text)
        for number, candidates in enumerate(fill(text), start=1):
            shown = "  ".join(f"{c['token']} {c['score']:.3f}" for c in candidates)
            print(f"  [MASK] {number}: {shown}")


def _start_run_folder(args, *inputs):
    from kbert.command_outputs import start_run_folder

    moved = start_run_folder(args.out, args.overwrite, [path for path in inputs if path])
    if moved:
        print(moved, flush=True)


def _train(args):
    from kbert.fine_tuning import fine_tune

    _start_run_folder(args, args.encoder, args.vocabulary)
    result = fine_tune(
        args.task, args.encoder, args.out, vocabulary=args.vocabulary, epochs=args.epochs,
        batch_size=args.batch_size, sequence_length=args.sequence_length,
        learning_rate=args.learning_rate, max_examples=args.max_examples,
        max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=_verbosity(args),
        source=args.source, attention_dropout=args.attention_dropout, lowercase=not args.cased,
    )
    _print_metrics(result)
    _print_saved(args.out)


def _distill(args):
    from kbert.compression_runs import distill_task

    _start_run_folder(args, args.teacher, args.student, args.unlabeled, *(args.general_corpus or ()))
    result = distill_task(
        args.task, args.teacher, args.out, student=args.student, unlabeled=args.unlabeled,
        transfer_examples=args.transfer_examples, general_corpus=args.general_corpus,
        general_steps=args.general_steps, layerwise_epochs=args.layerwise_epochs,
        temperature=args.temperature, alpha=args.alpha, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.learning_rate, max_examples=args.max_examples,
        max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=_verbosity(args),
    )
    _print_metrics(result)
    print(f"  parameters       {result['parameters']:,} (teacher {result['teacher_parameters']:,})")
    _print_saved(args.out)


def _prune(args):
    from kbert.compression_runs import prune_task

    _start_run_folder(args, args.model)
    result = prune_task(
        args.task, args.model, args.out, sparsity=args.sparsity, heads=args.heads, scope=args.scope,
        rewind=args.rewind, epochs=args.epochs, batch_size=args.batch_size,
        learning_rate=args.learning_rate, max_examples=args.max_examples,
        max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=_verbosity(args),
    )
    _print_metrics(result)
    report = result["sparsity"]
    print(f"  parameters       {result['parameters']:,} (before {result['parameters_before']:,})")
    print(f"  weight sparsity  {report['sparsity']:.4f} of the Transformer kernels")
    _print_saved(args.out)


def _print_saved(out):
    # TensorBoard on the folder that holds the run compares it with the runs beside it.
    runs = os.path.dirname(os.path.normpath(out)) or "."
    print(f"Saved {out}/model.keras and {out}/metrics.json.\n"
          f"Compare it with the runs beside it: tensorboard --logdir {runs}")


def _evaluate(args):
    import kbert
    from kbert.atomic_files import json_text, write_atomically, write_text
    from kbert.fine_tuning import evaluate_task

    model = kbert.load_model(args.model)
    result = evaluate_task(model, args.task, split=args.split, max_examples=args.max_examples,
                           source=args.source)
    _print_metrics(result)
    if args.out:
        write_atomically(args.out, lambda path: write_text(path, json_text(result)))
        print(f"Wrote {args.out}")


def _print_metrics(result):
    print(f"{result['task']} ({result['split']}, {result['examples']:,} examples):")
    from kbert.fine_tuning import CLASS_SCORES

    positive = result.get("positive_class")  # precision, recall and F1 are this class's
    scores = {f"{key} ({positive})" if positive and key in CLASS_SCORES else key: value
              for key, value in result.items() if isinstance(value, float)}
    width = max(map(len, scores), default=0)
    for label, value in scores.items():
        print(f"  {label:<{width}} {value:.4f}")


def _export(args):
    import kbert

    # Checked here, in the command's words (the library's message names its
    # `overwrite=True`); without --version the next free version is used.
    target = os.path.join(args.out, args.name, str(args.version))
    if args.version is not None and os.path.exists(target) and not args.overwrite:
        raise FileExistsError(f"{target} exists; choose another --version, or pass --overwrite "
                              "to replace it.")
    if args.overwrite and os.path.exists(target) and not os.path.isfile(os.path.join(target, "saved_model.pb")):
        raise ValueError(f"{target} is not an exported model (no saved_model.pb), so --overwrite does not "
                         "replace it; choose another --version.")
    model = kbert.load_model(args.model)
    text_pairs = {"pairs": True, "single": False, None: None}[args.texts]
    try:
        # kbert.export checks the ops before the version goes live.
        path = kbert.export(model, os.path.join(args.out, args.name), version=args.version,
                            overwrite=args.overwrite, text_pairs=text_pairs)
    except ValueError as error:
        if text_pairs is None and "text_pairs" in str(error):
            raise ValueError(f"{args.model} has not seen any text yet, so it is not known whether "
                             "it reads single texts or pairs; pass --texts single or --texts "
                             "pairs.") from None
        raise
    print(f"Exported {type(model).__name__} to {path} (signatures serving_default, from_token_ids, "
          "from_tf_example; every op is one TF Serving has)")


def _predict(args):
    import json

    texts = [_argument_bytes(text) for text in args.texts]
    if args.file is not None:
        texts += _read_lines(args.file)
    if not texts:
        raise ValueError("Give texts as arguments or with --file.")
    from kbert.serving import SavedModelPredictor

    predictor = SavedModelPredictor(args.saved_model, trust=args.trust)
    for example in predictor.predict_texts(texts):
        print(json.dumps(example, ensure_ascii=False))


def _argument_bytes(text):
    """A command-line argument as the bytes that were typed.

    Python decodes arguments as UTF-8, keeping undecodable bytes as lone
    surrogates; `os.fsencode` gives those bytes back, so a model gets what
    it would get from any other client.
    """
    return os.fsencode(text)


def _read_lines(path):
    """The lines of a file or of standard input (`-`), as bytes, without their line ends.

    Lines end as in every text file kbert reads (LF, CRLF or CR; a leading
    byte-order mark removed: `kbert.text_files`), but the bytes are sent as
    they are: a model server takes whatever a client sends.
    """
    import re

    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        with open(path, "rb") as file:
            data = file.read()
    lines = re.split(rb"\r\n|\r|\n", data.removeprefix(b"\xef\xbb\xbf"))
    if lines[-1] == b"":  # after the last line's end, or an empty file
        lines.pop()
    return lines


def _presets(args):
    from kbert.presets import PRESETS, parameter_count

    print(f"{'preset':<15} {'L':>3} {'H':>5} {'A':>3} {'I':>6} {'E':>5} {'shared':>6} {'parameters':>12}  "
          f"(vocabulary {args.vocabulary_size})")
    for name, p in PRESETS.items():
        count = parameter_count(name, args.vocabulary_size)
        shared = "yes" if p.get("num_groups", p["num_layers"]) < p["num_layers"] else "no"
        print(f"{name:<15} {p['num_layers']:>3} {p['hidden_dim']:>5} {p['num_heads']:>3} "
              f"{p['intermediate_dim']:>6} {p.get('embedding_size', p['hidden_dim']):>5} {shared:>6} "
              f"{count:>12,}")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, where it has one worth showing."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or default == argparse.SUPPRESS:
            return action.help
        if "default" in (action.help or ""):  # the help says it in its own words
            return action.help
        return super()._get_help_string(action)


BACKENDS = ("tensorflow", "jax", "torch")


def _add_attention_dropout_argument(command):
    command.add_argument("--attention-dropout", type=_fraction_below_one, default=None,
                         help="dropout of the attention probabilities (default: the encoder's, 0.1 for "
                              "presets); 0 trains through the fused attention kernel of a GPU")


def _add_backend_argument(command):
    command.add_argument("--backend", choices=BACKENDS, default=None,
                         help="the Keras backend to run on (default: KERAS_BACKEND, else "
                              "keras.json's, else tensorflow); the model file is the same on every backend")


def _use_backend(args):
    """Sets the Keras backend the command asked for, before Keras loads.

    `export` and `predict` write and run TensorFlow SavedModels: they run on
    TensorFlow whatever the environment names.
    """
    backend = getattr(args, "backend", None)
    if args.command in ("export", "predict"):
        backend = "tensorflow"
    if backend is None:
        return
    if "keras" in sys.modules and os.environ.get("KERAS_BACKEND") != backend:
        raise ValueError(f"--backend {backend}: Keras was loaded already, on {os.environ.get('KERAS_BACKEND')}.")
    os.environ["KERAS_BACKEND"] = backend


def _number(text, accept, wanted):
    # argparse names the flag in its error: "argument --learning-rate: ..."
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def _positive_float(text):
    return _number(text, lambda value: value > 0, "a finite number above 0")


def _open_fraction(text):
    return _number(text, lambda value: 0 < value < 1, "a number between 0 and 1 (both excluded)")


def _fraction_below_one(text):
    return _number(text, lambda value: 0 <= value < 1, "a number from 0 up to, not including, 1")


def _closed_fraction(text):
    return _number(text, lambda value: 0 <= value <= 1, "a number from 0 to 1")


def _integer(text, least):
    # argparse names the flag in its error: "argument --batch-size: ..."
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"must be an integer of at least {least}, got {text!r}")
    return value


def _positive_int(text):
    return _integer(text, 1)


def _non_negative_int(text):
    return _integer(text, 0)


def build_parser():
    """The `kbert` argument parser. It imports nothing heavy: `kbert --help` is instant."""
    from kbert.data.tfds_source import SOURCES  # plain Python: no TensorFlow
    from kbert.fine_tuning import RECIPES

    parser = argparse.ArgumentParser(
        prog="kbert", description="BERT for Keras: train, evaluate, serve.",
        epilog="`kbert COMMAND --help` shows a command's options.", formatter_class=_HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, description, run):
        sub = commands.add_parser(name, help=description, description=description[0].upper()
                                  + description[1:] + ".", formatter_class=_HelpFormatter)
        sub.set_defaults(run=run)
        return sub

    quiet = "one line per epoch instead of a progress bar"
    run_overwrite = ("replace the run in --out (its model.keras and metrics.json; its TensorBoard logs "
                     "are moved to --out/earlier-runs/)")

    demo = command("demo", "train and evaluate a spam filter on SMS Spam, then pretrain briefly "
                           "(offline)", _demo)
    demo.add_argument("--preset", default="tiny", help="encoder size (see `kbert presets`)")
    demo.add_argument("--epochs", type=_positive_int, default=3, help="fine-tuning epochs")
    demo.add_argument("--sequence-length", type=_positive_int, default=64, help="tokens per text")
    demo.add_argument("--learning-rate", type=_positive_float, default=1e-3, help="peak fine-tuning rate")
    demo.add_argument("--pretraining-steps", type=_non_negative_int, default=150,
                      help="steps of the closing pretraining example (0 skips it)")
    demo.add_argument("--export-dir", default="saved_models",
                      help="export the spam model to EXPORT_DIR/spam/<version> ('' skips the export)")
    demo.add_argument("--quiet", action="store_true", help=quiet)
    _add_backend_argument(demo)

    vocabulary = command("vocabulary", "learn a WordPiece vocabulary from text files", _vocabulary)
    vocabulary.add_argument("files", nargs="+", help="text files or glob patterns, one text per line")
    vocabulary.add_argument("--size", type=_positive_int, default=30522, help="tokens to learn")
    vocabulary.add_argument("--cased", action="store_true", help="keep case and accents")
    vocabulary.add_argument("--out", default="vocab.txt", help="the vocab.txt to write")
    vocabulary.add_argument("--overwrite", action="store_true", help="replace an existing --out file")

    objective_help = ("the sentence-pair objective: next-sentence prediction (BERT), sentence-order "
                      "prediction (ALBERT), or none (masked LM only)")
    pretrain = command("pretrain", "pretrain BERT or ALBERT (masked LM + NSP or SOP) on raw text files",
                       _pretrain)
    pretrain.add_argument("--corpus", action="append", required=True,
                          help="text files, folders or glob patterns (repeatable), or one folder "
                               "written by `kbert prepare-pretraining`")
    pretrain.add_argument("--out", required=True,
                          help="run folder: vocab.txt, tensorboard/, checkpoints/, pretrainer.keras; "
                               "running the same command again resumes")
    pretrain.add_argument("--preset", default="mini",
                          help="encoder size, BERT or ALBERT (see `kbert presets`)")
    pretrain.add_argument("--embedding-size", type=_positive_int, default=None,
                          help="override the preset's embedding width E (ALBERT's factorized "
                               "embeddings when below the hidden size)")
    pretrain.add_argument("--num-groups", type=_positive_int, default=None,
                          help="override the preset's groups of layers that share weights "
                               "(1: every layer shares one set, as ALBERT)")
    pretrain.add_argument("--vocabulary", help="vocab.txt to use (default: learn one from the corpus)")
    pretrain.add_argument("--vocabulary-size", type=_positive_int, default=30522,
                          help="tokens of the vocabulary learned when --vocabulary is not given")
    pretrain.add_argument("--cased", action="store_true", help="keep case and accents")
    pretrain.add_argument("--sequence-length", type=_positive_int, default=None,
                          help="tokens per example, [CLS] and [SEP]s included (default: 128, or "
                               "the prepared folder's)")
    pretrain.add_argument("--batch-size", type=_positive_int, default=32,
                          help="examples per step, across all replicas and workers")
    pretrain.add_argument("--gradient-accumulation-steps", type=_positive_int, default=None,
                          help="update the weights every N steps with their mean gradient (N >= 2): "
                               "an effective batch N times --batch-size")
    pretrain.add_argument("--epochs", type=_positive_int, default=1, help="epochs to train")
    pretrain.add_argument("--steps-per-epoch", type=_positive_int, default=None,
                          help="steps per epoch (default: one pass over the corpus)")
    pretrain.add_argument("--learning-rate", type=_positive_float, default=None,
                          help="peak learning rate (default: 1e-4 for BERT-base, more for "
                               "narrower encoders)")
    pretrain.add_argument("--mask-rate", type=_open_fraction, default=0.15, help="share of tokens to predict")
    pretrain.add_argument("--objective", choices=("nsp", "sop", "none"), default=None,
                          help=objective_help + " (default: nsp, or the prepared folder's)")
    pretrain.add_argument("--no-next-sentence", action="store_const", dest="objective", const="none",
                          help="masked LM only: the same as --objective none")
    pretrain.add_argument("--whole-word-masking", action="store_true",
                          help="mask all pieces of a word together")
    pretrain.add_argument("--max-ngram", type=_positive_int, default=1,
                          help="mask spans of up to this many whole words, shorter spans more "
                               "often (ALBERT's n-gram masking: 3); 1 masks tokens one by one")
    pretrain.add_argument("--document-boundary", choices=("file", "blank_line"), default="file",
                          help="what ends a document: each file is one, or blank lines end them")
    pretrain.add_argument("--backup-every", type=_positive_int, default=500,
                          help="steps between backups (a killed run resumes from the last one)")
    pretrain.add_argument("--seed", type=int, default=0, help="fixes pairs, order, masks and weights")
    _add_attention_dropout_argument(pretrain)
    pretrain.add_argument("--quiet", action="store_true", help=quiet)
    _add_strategy_arguments(pretrain)
    _add_backend_argument(pretrain)

    prepare = command("prepare-pretraining", "write a corpus' segment pairs to sharded TFRecords",
                      _prepare_pretraining)
    prepare.add_argument("--corpus", action="append", required=True,
                         help="text files, folders or glob patterns (repeatable)")
    prepare.add_argument("--vocabulary", required=True, help="the vocab.txt to tokenize with")
    prepare.add_argument("--out", required=True,
                         help="the folder to write (it must not exist, or be one this command wrote, "
                              "with --overwrite)")
    prepare.add_argument("--cased", action="store_true", help="keep case and accents")
    prepare.add_argument("--sequence-length", type=_positive_int, default=128,
                         help="tokens per example, [CLS] and [SEP]s included")
    prepare.add_argument("--objective", choices=("nsp", "sop", "none"), default="nsp",
                         help=objective_help + "; the pairs are made for it, and pretraining on "
                              "them must use the same")
    prepare.add_argument("--no-next-sentence", action="store_const", dest="objective", const="none",
                         help="single segments for masked LM only: the same as --objective none")
    prepare.add_argument("--document-boundary", choices=("file", "blank_line"), default="file",
                         help="what ends a document: each file is one, or blank lines end them")
    prepare.add_argument("--examples-per-shard", type=_positive_int, default=100_000,
                         help="segment pairs per TFRecord file")
    prepare.add_argument("--seed", type=int, default=0, help="fixes the pairs")
    prepare.add_argument("--overwrite", action="store_true",
                         help="replace an --out folder that prepare-pretraining wrote")

    fill_mask = command("fill-mask", "top tokens for each [MASK] in a text", _fill_mask)
    fill_mask.add_argument("model", help="a pretraining run folder, a pretrainer .keras file, or a "
                                         "BERT checkpoint with its masked-LM head (folder or name)")
    fill_mask.add_argument("texts", nargs="+", help="texts with one or more [MASK]")
    fill_mask.add_argument("--vocabulary",
                           help="vocab.txt for a .keras file (default: the run folder's)")
    fill_mask.add_argument("--top-k", type=_positive_int, default=5, help="tokens shown per [MASK]")
    fill_mask.add_argument("--cased", action="store_true",
                           help="keep case and accents: the vocabulary is cased (pretrain --cased)")
    _add_backend_argument(fill_mask)

    train = command("train", "fine-tune on a task's data set, evaluate, save", _train)
    train.add_argument("task", choices=sorted(RECIPES), help="the data set and its task")
    train.add_argument("--encoder", default="tiny",
                       help="a preset (tiny ... large), a checkpoint folder or name (all-minilm-l6-v2, "
                            "a Hugging Face id such as bert-base-uncased, a keras-hub preset such as "
                            "bert_base_en_uncased), a `kbert pretrain` run folder, or a .keras file")
    train.add_argument("--vocabulary", help="vocab.txt for a preset or .keras encoder "
                                            "(default for presets: bert-base-uncased's)")
    train.add_argument("--cased", action="store_true",
                       help="keep case and accents: the vocabulary (--vocabulary, or a pretraining "
                            "run's vocab.txt) is cased")
    train.add_argument("--out", required=True, help="run folder: model.keras, metrics.json, tensorboard/")
    train.add_argument("--overwrite", action="store_true", help=run_overwrite)
    train.add_argument("--epochs", type=_positive_int, default=3, help="epochs to train")
    train.add_argument("--batch-size", type=_positive_int, default=32,
                       help="examples per step, across all replicas and workers")
    train.add_argument("--sequence-length", type=_positive_int, default=None,
                       help="default: 64 for short texts, 128 for pairs and NER, 384 for SQuAD")
    train.add_argument("--learning-rate", type=_positive_float, default=None,
                       help="peak learning rate (default: 5e-5 for BERT-base, more for smaller "
                            "encoders)")
    train.add_argument("--max-examples", type=_positive_int, default=None,
                       help="fine-tune on a seeded random subset of this many training examples")
    train.add_argument("--max-eval-examples", type=_positive_int, default=None,
                       help="evaluate on the first this many examples of the evaluation split")
    train.add_argument("--seed", type=int, default=0, help="fixes the subset, order and weights")
    _add_attention_dropout_argument(train)
    train.add_argument("--source", choices=SOURCES, default="local",
                       help="local: the canonical files (offline); tfds: TensorFlow Datasets "
                            "(sst2, rte, mrpc, squad, conll2003; downloaded once)")
    train.add_argument("--quiet", action="store_true", help=quiet)
    _add_strategy_arguments(train)
    _add_backend_argument(train)

    classification = sorted(name for name, info in RECIPES.items() if info.builder == "classifier")
    distill = command("distill", "distil a fine-tuned classifier into a smaller student, evaluate, save",
                      _distill)
    distill.add_argument("task", choices=classification, help="the data set the teacher was trained on")
    distill.add_argument("--teacher", required=True, help="the teacher's model.keras (of `kbert train`)")
    distill.add_argument("--student", default="mini",
                         help="a preset (tiny, mini, small, ...), 'layers:0,2,4' for a copy of the "
                              "teacher's layers 0, 2 and 4, or a .keras file holding an encoder")
    distill.add_argument("--out", required=True, help="run folder: model.keras, metrics.json, tensorboard/")
    distill.add_argument("--overwrite", action="store_true", help=run_overwrite)
    distill.add_argument("--unlabeled", help="a text file, one text per line, that the teacher labels "
                                             "for the student (a transfer set)")
    distill.add_argument("--transfer-examples", type=_non_negative_int, default=0,
                         help="add this many training examples outside --max-examples to the "
                              "transfer set, without their labels")
    distill.add_argument("--general-corpus", action="append", default=None,
                         help="raw text files or glob patterns (repeatable) for general distillation")
    distill.add_argument("--general-steps", type=_non_negative_int, default=0,
                         help="steps of general (layer-wise) distillation on --general-corpus first")
    distill.add_argument("--layerwise-epochs", type=_non_negative_int, default=0,
                         help="epochs of layer-wise distillation on the task's texts before task "
                              "distillation (TinyBERT)")
    distill.add_argument("--temperature", type=_positive_float, default=2.0, help="softmax temperature T")
    distill.add_argument("--alpha", type=_closed_fraction, default=0.5,
                         help="weight of the distillation term; 1 - alpha weighs the labels")
    distill.add_argument("--epochs", type=_positive_int, default=3, help="epochs of task distillation")
    distill.add_argument("--batch-size", type=_positive_int, default=32, help="examples per step")
    distill.add_argument("--learning-rate", type=_positive_float, default=None,
                         help="peak learning rate (default: by the student's width)")
    distill.add_argument("--max-examples", type=_positive_int, default=None,
                         help="labelled training examples: a seeded random subset of this many")
    distill.add_argument("--max-eval-examples", type=_positive_int, default=None,
                         help="evaluate on the first this many examples of the evaluation split")
    distill.add_argument("--seed", type=int, default=0, help="fixes the subsets, order and weights")
    distill.add_argument("--quiet", action="store_true", help=quiet)
    _add_backend_argument(distill)

    prune = command("prune", "prune a fine-tuned model (weights, attention heads) while it trains "
                             "further, evaluate, save", _prune)
    prune.add_argument("model", help="a task model's .keras file (e.g. the model.keras of `kbert train`)")
    prune.add_argument("--task", required=True, choices=sorted(RECIPES),
                       help="the data set the model was trained on")
    prune.add_argument("--out", required=True, help="run folder: model.keras, metrics.json, tensorboard/")
    prune.add_argument("--overwrite", action="store_true", help=run_overwrite)
    prune.add_argument("--sparsity", type=_fraction_below_one, default=0.0,
                       help="share of the Transformer kernels' weights set to zero, by magnitude")
    prune.add_argument("--heads", type=_fraction_below_one, default=0.0,
                       help="share of attention heads removed, least important first")
    prune.add_argument("--scope", choices=("layer", "global"), default="layer",
                       help="the sparsity holds for each kernel, or over all of them")
    prune.add_argument("--rewind", action="store_true",
                       help="lottery-ticket rewinding: the kept weights go back to their values "
                            "before this training, then train again with the mask")
    prune.add_argument("--epochs", type=_positive_int, default=1, help="epochs of training while pruning")
    prune.add_argument("--batch-size", type=_positive_int, default=32, help="examples per step")
    prune.add_argument("--learning-rate", type=_positive_float, default=2e-5, help="peak learning rate")
    prune.add_argument("--max-examples", type=_positive_int, default=None,
                       help="train on a seeded random subset of this many training examples")
    prune.add_argument("--max-eval-examples", type=_positive_int, default=None,
                       help="evaluate on the first this many examples of the evaluation split")
    prune.add_argument("--seed", type=int, default=0, help="fixes the subset, order and weights")
    prune.add_argument("--quiet", action="store_true", help=quiet)
    _add_backend_argument(prune)

    evaluate = command("evaluate", "a trained task model's metrics on a split", _evaluate)
    evaluate.add_argument("model", help="the model.keras of `kbert train`")
    evaluate.add_argument("--task", required=True, choices=sorted(RECIPES),
                          help="the data set the model was trained on")
    evaluate.add_argument("--split", default=None, help="default: the task's evaluation split")
    evaluate.add_argument("--max-examples", type=_positive_int, default=None,
                          help="evaluate on the first this many examples")
    evaluate.add_argument("--source", choices=SOURCES, default="local",
                          help="where the data comes from, as for `kbert train`")
    evaluate.add_argument("--out", help="write the metrics to this JSON file")
    evaluate.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    _add_backend_argument(evaluate)

    export = command("export", "write a trained model as a SavedModel for TF Serving", _export)
    export.add_argument("model", help="a task model's .keras file (e.g. the model.keras of `kbert train`)")
    export.add_argument("--name", required=True, help="the model's name: writes OUT/NAME/VERSION/")
    export.add_argument("--out", default="saved_models", help="the folder of served models")
    export.add_argument("--version", type=_positive_int, default=None, help="default: one more than the highest")
    export.add_argument("--overwrite", action="store_true", help="replace an existing version")
    export.add_argument("--texts", choices=("single", "pairs"), default=None,
                        help="for a classifier or embedder: single texts or pairs (default: as trained)")

    predict = command("predict", "run an exported SavedModel on texts (one JSON line each)", _predict)
    predict.add_argument("saved_model", help="a model folder of versions (saved_models/spam) or a version folder")
    predict.add_argument("texts", nargs="*", help="texts, grouped per example in the model's input order: "
                                                  "text [text_pair] | question context | context choice...")
    predict.add_argument("--file", help="read the texts from this file, one per line, after any "
                                        "given as arguments ('-': standard input); bytes are sent "
                                        "as they are, whatever their encoding")
    predict.add_argument("--trust", action="store_true",
                         help="run a SavedModel whose ops are not all on kbert's list of safe ops (one that "
                              "can read or write files, reach the network or run programs): only for a "
                              "model whose source you trust")

    presets = command("presets", "list encoder sizes and parameter counts", _presets)
    presets.add_argument("--vocabulary-size", type=_positive_int, default=30522,
                         help="the vocabulary the counts assume")
    return parser


def main(argv=None):
    from kbert.command_outputs import remove_empty_folders

    args = build_parser().parse_args(argv)
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
        _use_backend(args)
        _show_kbert_warnings_in_one_line(args.command)
        if args.command != "presets":
            from kbert.tensorflow_support import import_tensorflow_quietly

            import_tensorflow_quietly()
        with _strategy_scope(args):
            args.run(args)
        return 0
    except KeyboardInterrupt:
        print(f"kbert {args.command}: interrupted{_INTERRUPTED.get(args.command, '.')}", file=sys.stderr)
        return 130
    except Exception as error:
        if not _is_user_error(error):
            raise
        print(f"kbert {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2


def _show_kbert_warnings_in_one_line(command):
    """kbert's own warnings as `kbert COMMAND: warning: ...`, not Python's two lines with a source path."""
    import warnings

    package = os.path.dirname(os.path.abspath(__file__))
    python_format = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not os.path.abspath(filename).startswith(package + os.sep):
            return python_format(message, category, filename, lineno, file, line)
        print(f"kbert {command}: warning: {_one_line(message)}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show


_INTERRUPTED = {
    "pretrain": "; run the same command again to resume from the last backup.",
    "train": "; run it again to start over (the logs so far are moved aside), or pass another --out.",
}


def _is_user_error(error):
    """Whether `error` is what a user's input or machine causes (a bad value, file, disk), not a bug in kbert."""
    import zipfile

    if isinstance(error, (ValueError, TypeError, OSError, TimeoutError, zipfile.BadZipFile)):
        return True
    tensorflow = sys.modules.get("tensorflow")  # its errors only where it was loaded
    errors = getattr(tensorflow, "errors", None)
    return errors is not None and isinstance(error, errors.OpError)


def _one_line(error):
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename and error.strerror:
        message = f"{error.filename}: {error.strerror}"
    return " ".join(line.strip() for line in str(message).strip().splitlines()[:1])


def _first_missing(path):
    """The highest folder of `path` that does not exist yet: what making `path` would make."""
    path = os.path.abspath(path)
    while not os.path.exists(os.path.dirname(path)):
        path = os.path.dirname(path)
    return path


def _output_folders(args):
    """The folders a command writes into, made by it when missing."""
    out = getattr(args, "out", None)
    if not out:
        return []
    if args.command in ("vocabulary", "evaluate"):  # --out is a file
        return [os.path.dirname(os.path.abspath(out))]
    if args.command == "export":
        return [out, os.path.join(out, args.name)]
    return [out]


def _check_arguments(args):
    """Checks a command's files and folders before any work, and before any folder is made."""
    import glob

    from kbert.command_outputs import check_input_file, check_output_file, check_output_folder

    command = args.command
    vocabulary = getattr(args, "vocabulary", None)
    if isinstance(vocabulary, str):
        check_input_file(vocabulary, "--vocabulary")
    if command == "vocabulary":
        inputs = [path for pattern in args.files for path in glob.glob(pattern)] + args.files
        check_output_file(args.out, "--out", args.overwrite, inputs)
    elif command in ("pretrain", "prepare-pretraining"):
        inputs = [path for pattern in args.corpus for path in glob.glob(pattern)] + args.corpus
        check_output_folder(args.out, "--out", inputs + [vocabulary] if command == "prepare-pretraining" else ())
    elif command in ("evaluate", "export", "prune"):
        check_input_file(args.model, "MODEL")
    elif command == "distill":
        check_input_file(args.teacher, "--teacher")
        if args.unlabeled:
            check_input_file(args.unlabeled, "--unlabeled")
        if args.student.endswith(".keras"):
            check_input_file(args.student, "--student")
    elif command == "predict" and args.file not in (None, "-"):
        check_input_file(args.file, "--file")
    if command == "evaluate" and args.out:
        check_output_file(args.out, "--out", args.overwrite, [args.model])
    if command == "export":
        check_output_folder(args.out, "--out")
    if command == "demo" and args.export_dir:
        check_output_folder(args.export_dir, "--export-dir")


if __name__ == "__main__":
    sys.exit(main())
