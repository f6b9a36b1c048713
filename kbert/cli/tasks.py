"""`kbert train` and `kbert evaluate`: fine-tuning on a task's data set, and scoring a trained model."""

import os

from kbert.cli.arguments import (
    add_attention_dropout_argument,
    add_backend_argument,
    add_command,
    add_quiet_argument,
    add_run_folder_arguments,
    add_strategy_arguments,
    add_subset_and_seed_arguments,
    folder_of_the_out_file,
    positive_float,
    positive_int,
    verbosity,
)


def add_commands(commands):
    from kbert.data.tfds_source import SOURCES  # plain Python: no TensorFlow
    from kbert.runs.fine_tuning import RECIPES

    train = add_command(commands, "train", "fine-tune on a task's data set, evaluate, save", _train,
                        interrupted="; run it again to start over (the logs so far are moved aside), or pass "
                                    "another --out.")
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
    add_run_folder_arguments(train)
    train.add_argument("--epochs", type=positive_int, default=3, help="epochs to train")
    train.add_argument("--batch-size", type=positive_int, default=32,
                       help="examples per step, across all replicas and workers")
    train.add_argument("--sequence-length", type=positive_int, default=None,
                       help="default: 64 for short texts, 128 for pairs and NER, 384 for SQuAD")
    train.add_argument("--learning-rate", type=positive_float, default=None,
                       help="peak learning rate (default: 5e-5 for BERT-base, more for smaller "
                            "encoders)")
    add_subset_and_seed_arguments(train, "fine-tune on a seeded random subset of this many training examples",
                                  "fixes the subset, order and weights")
    add_attention_dropout_argument(train)
    train.add_argument("--source", choices=SOURCES, default="local",
                       help="local: the canonical files (offline); tfds: TensorFlow Datasets "
                            "(sst2, rte, mrpc, squad, conll2003; downloaded once)")
    add_quiet_argument(train)
    add_strategy_arguments(train)
    add_backend_argument(train)

    evaluate = add_command(commands, "evaluate", "a trained task model's metrics on a split", _evaluate,
                           check=_check_evaluate, output_folders=folder_of_the_out_file)
    evaluate.add_argument("model", help="the model.keras of `kbert train`")
    evaluate.add_argument("--task", required=True, choices=sorted(RECIPES),
                          help="the data set the model was trained on")
    evaluate.add_argument("--split", default=None, help="default: the task's evaluation split")
    evaluate.add_argument("--max-examples", type=positive_int, default=None,
                          help="evaluate on the first this many examples")
    evaluate.add_argument("--source", choices=SOURCES, default="local",
                          help="where the data comes from, as for `kbert train`")
    evaluate.add_argument("--out", help="write the metrics to this JSON file")
    evaluate.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    add_backend_argument(evaluate)


def _check_evaluate(args):
    from kbert.runs.outputs import check_input_file, check_output_file

    check_input_file(args.model, "MODEL")
    if args.out:
        check_output_file(args.out, "--out", args.overwrite, [args.model])


def start_run_folder(args, *inputs):
    """Makes `--out` ready for a run (`kbert.runs.outputs.start_run_folder`), saying what it moved aside."""
    from kbert.runs.outputs import start_run_folder as start

    moved = start(args.out, args.overwrite, [path for path in inputs if path])
    if moved:
        print(moved, flush=True)


def _train(args):
    from kbert.runs.fine_tuning import fine_tune

    start_run_folder(args, args.encoder, args.vocabulary)
    result = fine_tune(
        args.task, args.encoder, args.out, vocabulary=args.vocabulary, epochs=args.epochs,
        batch_size=args.batch_size, sequence_length=args.sequence_length,
        learning_rate=args.learning_rate, max_examples=args.max_examples,
        max_eval_examples=args.max_eval_examples, seed=args.seed, verbose=verbosity(args),
        source=args.source, attention_dropout=args.attention_dropout, lowercase=not args.cased,
    )
    print_metrics(result)
    print_saved(args.out)


def print_saved(out):
    """Where a run's model and metrics went, and how to compare it with the runs beside it."""
    # TensorBoard on the folder that holds the run compares it with the runs beside it.
    runs = os.path.dirname(os.path.normpath(out)) or "."
    print(f"Saved {out}/model.keras and {out}/metrics.json.\n"
          f"Compare it with the runs beside it: tensorboard --logdir {runs}")


def _evaluate(args):
    import kbert
    from kbert.io.atomic_files import json_text, write_atomically, write_text
    from kbert.runs.fine_tuning import evaluate_task

    model = kbert.load_model(args.model)
    result = evaluate_task(model, args.task, split=args.split, max_examples=args.max_examples,
                           source=args.source)
    print_metrics(result)
    if args.out:
        write_atomically(args.out, lambda path: write_text(path, json_text(result)))
        print(f"Wrote {args.out}")


def print_metrics(result):
    """A run's scores, one a line; a two-class task's precision, recall and F1 named with their class."""
    print(f"{result['task']} ({result['split']}, {result['examples']:,} examples):")
    from kbert.runs.fine_tuning import CLASS_SCORES

    positive = result.get("positive_class")  # precision, recall and F1 are this class's
    scores = {f"{key} ({positive})" if positive and key in CLASS_SCORES else key: value
              for key, value in result.items() if isinstance(value, float)}
    width = max(map(len, scores), default=0)
    for label, value in scores.items():
        print(f"  {label:<{width}} {value:.4f}")
