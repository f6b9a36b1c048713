"""The `kbert` command line."""

import argparse
import sys


def _demo(args):
    from kbert import demo

    demo.run(preset=args.preset, epochs=args.epochs, sequence_length=args.sequence_length,
             learning_rate=args.learning_rate, pretraining_steps=args.pretraining_steps,
             export_dir=args.export_dir, verbose=2 if args.quiet else 1)


def _vocabulary(args):
    import kbert

    vocabulary = kbert.learn_vocabulary(files=args.files, vocabulary_size=args.size,
                                        lowercase=not args.cased)
    _write_lines_atomically(args.out, vocabulary)  # never a half-written vocabulary
    print(f"Wrote {len(vocabulary)} tokens to {args.out}")


def _read_or_learn_vocabulary(args, out_dir):
    """The run's vocabulary: --vocabulary, or the run folder's, or learned from the corpus."""
    import kbert
    from kbert.preprocessing.tokenizer import read_vocabulary

    saved = out_dir / "vocab.txt"
    if args.vocabulary:
        return read_vocabulary(args.vocabulary)
    if saved.exists():  # a resumed run keeps its vocabulary
        return read_vocabulary(str(saved))
    return kbert.learn_vocabulary(files=args.corpus, vocabulary_size=args.vocabulary_size,
                                  lowercase=not args.cased)


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
    from kbert.atomic_files import write_atomically

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocabulary = _read_or_learn_vocabulary(args, out_dir)
    if not (out_dir / "vocab.txt").exists():
        _write_lines_atomically(out_dir / "vocab.txt", vocabulary)
    data = kbert.pretraining_dataset(
        args.corpus, vocabulary=vocabulary, sequence_length=args.sequence_length,
        batch_size=args.batch_size, mask_rate=args.mask_rate,
        next_sentence=not args.no_next_sentence, whole_word_masking=args.whole_word_masking,
        document_boundary=args.document_boundary, seed=args.seed, lowercase=not args.cased,
    )
    keras.utils.set_random_seed(args.seed)
    encoder = kbert.Encoder.from_preset(
        args.preset, vocabulary_size=len(vocabulary),
        max_sequence_length=max(512, args.sequence_length),
    )
    pretrainer = kbert.Pretrainer(encoder, next_sentence=not args.no_next_sentence)
    pretrainer.compile(learning_rate=args.learning_rate)
    if args.steps_per_epoch:
        data = data.repeat()
    callbacks = kbert.callbacks.standard(str(out_dir), save_freq=args.backup_every)
    callbacks.append(kbert.callbacks.FillMaskLogger(
        str(out_dir / "tensorboard"), PRETRAIN_FILL_MASK_SENTENCES, vocabulary, lowercase=not args.cased,
        every=100,
    ))
    pretrainer.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
                   verbose=2 if args.quiet else 1)
    model_path = out_dir / "pretrainer.keras"
    write_atomically(str(model_path), pretrainer.save)
    print(f"Saved {model_path} (encoder and heads) and {out_dir / 'vocab.txt'}.\n"
          f"Try: kbert fill-mask {out_dir} \"the king [MASK] the crown.\"")


def _prepare_pretraining(args):
    from kbert.data.pretraining import prepare_pretraining_data
    from kbert.preprocessing.tokenizer import read_vocabulary

    metadata = prepare_pretraining_data(
        args.corpus, args.out, vocabulary=read_vocabulary(args.vocabulary),
        sequence_length=args.sequence_length, next_sentence=not args.no_next_sentence,
        document_boundary=args.document_boundary, seed=args.seed, lowercase=not args.cased,
        overwrite=args.overwrite,
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
                           top_k=args.top_k)
    _print_fills(fill, args.texts)


def _print_fills(fill, texts):
    for text in texts:
        print(text)
        for number, candidates in enumerate(fill(text), start=1):
            shown = "  ".join(f"{c['token']} {c['score']:.3f}" for c in candidates)
            print(f"  [MASK] {number}: {shown}")


def _train(args):
    from kbert.fine_tuning import fine_tune

    result = fine_tune(
        args.task, args.encoder, args.out, vocabulary=args.vocabulary, epochs=args.epochs,
        batch_size=args.batch_size, sequence_length=args.sequence_length,
        learning_rate=args.learning_rate, max_examples=args.max_examples,
        max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=2 if args.quiet else 1,
        source=args.source,
    )
    _print_metrics(result)
    print(f"Saved {args.out}/model.keras and {args.out}/metrics.json "
          f"(TensorBoard: tensorboard --logdir {args.out}/tensorboard).")


def _evaluate(args):
    import json

    import kbert
    from kbert.atomic_files import write_atomically
    from kbert.fine_tuning import evaluate_task

    model = kbert.load_model(args.model)
    result = evaluate_task(model, args.task, split=args.split, max_examples=args.max_examples,
                           source=args.source)
    _print_metrics(result)
    if args.out:
        write_atomically(args.out, lambda path: open(path, "w").write(json.dumps(result, indent=2) + "\n"))
        print(f"Wrote {args.out}")


def _print_metrics(result):
    print(f"{result['task']} ({result['split']}, {result['examples']:,} examples):")
    for key, value in result.items():
        if isinstance(value, float):
            print(f"  {key:<16} {value:.4f}")


def _export(args):
    import os

    import kbert

    model = kbert.load_model(args.model)
    text_pairs = {"pairs": True, "single": False, None: None}[args.texts]
    path = kbert.export(model, os.path.join(args.out, args.name), version=args.version,
                        overwrite=args.overwrite, text_pairs=text_pairs)  # checks the ops before the rename
    print(f"Exported {type(model).__name__} to {path} (signatures serving_default, from_token_ids, "
          "from_tf_example; every op is one TF Serving has)")


def _predict(args):
    import json

    from kbert.serving import SavedModelPredictor

    predictor = SavedModelPredictor(args.saved_model)
    for example in predictor.predict_texts(args.texts):
        print(json.dumps(example, ensure_ascii=False))


def _presets(args):
    from kbert.presets import PRESETS, parameter_count

    print(f"{'preset':<8} {'L':>3} {'H':>5} {'A':>3} {'I':>5} {'parameters':>12}  "
          f"(vocabulary {args.vocabulary_size})")
    for name, p in PRESETS.items():
        count = parameter_count(name, args.vocabulary_size)
        print(f"{name:<8} {p['num_layers']:>3} {p['hidden_dim']:>5} {p['num_heads']:>3} "
              f"{p['intermediate_dim']:>5} {count:>12,}")


def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT for Keras: train, evaluate, serve.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo", help="train and evaluate a spam filter on SMS Spam, then pretrain briefly (offline)"
    )
    demo.add_argument("--preset", default="tiny")
    demo.add_argument("--epochs", type=int, default=3)
    demo.add_argument("--sequence-length", type=int, default=64)
    demo.add_argument("--learning-rate", type=float, default=1e-3)
    demo.add_argument("--pretraining-steps", type=int, default=150,
                      help="steps of the closing pretraining example (0 skips it)")
    demo.add_argument("--export-dir", default="saved_models",
                      help="export the spam model to EXPORT_DIR/spam/<version> ('' skips the export)")
    demo.add_argument("--quiet", action="store_true", help="one line per epoch")
    demo.set_defaults(run=_demo)

    vocabulary = commands.add_parser("vocabulary", help="learn a WordPiece vocabulary from text files")
    vocabulary.add_argument("files", nargs="+", help="text files or glob patterns, one text per line")
    vocabulary.add_argument("--size", type=int, default=30522)
    vocabulary.add_argument("--cased", action="store_true", help="keep case and accents")
    vocabulary.add_argument("--out", default="vocab.txt")
    vocabulary.set_defaults(run=_vocabulary)

    pretrain = commands.add_parser("pretrain", help="pretrain BERT (masked LM + NSP) on raw text files")
    pretrain.add_argument("--corpus", action="append", required=True,
                          help="text files, folders or glob patterns (repeatable)")
    pretrain.add_argument("--out", required=True,
                          help="run folder: vocab.txt, tensorboard/, checkpoints/, pretrainer.keras; "
                               "running the same command again resumes")
    pretrain.add_argument("--preset", default="mini")
    pretrain.add_argument("--vocabulary", help="vocab.txt to use (default: learn one)")
    pretrain.add_argument("--vocabulary-size", type=int, default=30522)
    pretrain.add_argument("--cased", action="store_true")
    pretrain.add_argument("--sequence-length", type=int, default=128)
    pretrain.add_argument("--batch-size", type=int, default=32)
    pretrain.add_argument("--epochs", type=int, default=1)
    pretrain.add_argument("--steps-per-epoch", type=int, default=None)
    pretrain.add_argument("--learning-rate", type=float, default=None)
    pretrain.add_argument("--mask-rate", type=float, default=0.15)
    pretrain.add_argument("--no-next-sentence", action="store_true", help="masked LM only")
    pretrain.add_argument("--whole-word-masking", action="store_true")
    pretrain.add_argument("--document-boundary", choices=("file", "blank_line"), default="file")
    pretrain.add_argument("--backup-every", type=int, default=500, help="steps between backups")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument("--quiet", action="store_true", help="one line per epoch")
    pretrain.set_defaults(run=_pretrain)

    prepare = commands.add_parser("prepare-pretraining",
                                  help="write a corpus' segment pairs to sharded TFRecords")
    prepare.add_argument("--corpus", action="append", required=True)
    prepare.add_argument("--vocabulary", required=True)
    prepare.add_argument("--out", required=True)
    prepare.add_argument("--cased", action="store_true")
    prepare.add_argument("--sequence-length", type=int, default=128)
    prepare.add_argument("--no-next-sentence", action="store_true")
    prepare.add_argument("--document-boundary", choices=("file", "blank_line"), default="file")
    prepare.add_argument("--seed", type=int, default=0)
    prepare.add_argument("--overwrite", action="store_true")
    prepare.set_defaults(run=_prepare_pretraining)

    fill_mask = commands.add_parser("fill-mask", help="top tokens for each [MASK] in a text")
    fill_mask.add_argument("model", help="a pretraining run folder, a pretrainer .keras file, or a "
                                         "BERT checkpoint with its masked-LM head (folder or name)")
    fill_mask.add_argument("texts", nargs="+")
    fill_mask.add_argument("--vocabulary")
    fill_mask.add_argument("--top-k", type=int, default=5)
    fill_mask.set_defaults(run=_fill_mask)

    from kbert.data.tfds_source import SOURCES
    from kbert.fine_tuning import RECIPES

    train = commands.add_parser("train", help="fine-tune on a task's data set, evaluate, save")
    train.add_argument("task", choices=sorted(RECIPES))
    train.add_argument("--encoder", default="tiny",
                       help="a preset (tiny ... large), a checkpoint folder or name (all-minilm-l6-v2, "
                            "a Hugging Face id such as bert-base-uncased, a keras-hub preset such as "
                            "bert_base_en_uncased), a `kbert pretrain` run folder, or a .keras file")
    train.add_argument("--vocabulary", help="vocab.txt for a preset or .keras encoder "
                                            "(default for presets: bert-base-uncased's)")
    train.add_argument("--out", required=True, help="run folder: model.keras, metrics.json, tensorboard/")
    train.add_argument("--epochs", type=int, default=3)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--sequence-length", type=int, default=None,
                       help="default: 64 for short texts, 128 for pairs and NER, 384 for SQuAD")
    train.add_argument("--learning-rate", type=float, default=None)
    train.add_argument("--max-examples", type=int, default=None,
                       help="fine-tune on a seeded random subset of this many training examples")
    train.add_argument("--max-eval-examples", type=int, default=None)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--source", choices=SOURCES, default="local",
                       help="local: the canonical files (offline); tfds: TensorFlow Datasets "
                            "(sst2, rte, mrpc, squad, conll2003; downloaded once)")
    train.add_argument("--quiet", action="store_true", help="one line per epoch")
    train.set_defaults(run=_train)

    evaluate = commands.add_parser("evaluate", help="a trained task model's metrics on a split")
    evaluate.add_argument("model", help="the model.keras of `kbert train`")
    evaluate.add_argument("--task", required=True, choices=sorted(RECIPES))
    evaluate.add_argument("--split", default=None, help="default: the task's evaluation split")
    evaluate.add_argument("--max-examples", type=int, default=None)
    evaluate.add_argument("--source", choices=SOURCES, default="local",
                          help="where the data comes from, as for `kbert train`")
    evaluate.add_argument("--out", help="write the metrics to this JSON file")
    evaluate.set_defaults(run=_evaluate)

    export = commands.add_parser("export", help="write a trained model as a SavedModel for TF Serving")
    export.add_argument("model", help="a task model's .keras file (e.g. the model.keras of `kbert train`)")
    export.add_argument("--name", required=True, help="the model's name: writes OUT/NAME/VERSION/")
    export.add_argument("--out", default="saved_models")
    export.add_argument("--version", type=int, default=None, help="default: one more than the highest")
    export.add_argument("--overwrite", action="store_true", help="replace an existing version")
    export.add_argument("--texts", choices=("single", "pairs"), default=None,
                        help="for a classifier or embedder: single texts or pairs (default: as trained)")
    export.set_defaults(run=_export)

    predict = commands.add_parser("predict", help="run an exported SavedModel on texts (one JSON line each)")
    predict.add_argument("saved_model", help="a model folder of versions (saved_models/spam) or a version folder")
    predict.add_argument("texts", nargs="+", help="texts, grouped per example in the model's input order: "
                                                  "text [text_pair] | question context | context choice...")
    predict.set_defaults(run=_predict)

    presets = commands.add_parser("presets", help="list encoder sizes and parameter counts")
    presets.add_argument("--vocabulary-size", type=int, default=30522)
    presets.set_defaults(run=_presets)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as error:
        print(f"kbert {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
