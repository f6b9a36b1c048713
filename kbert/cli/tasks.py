"""`kbert train` and `kbert evaluate`: fine-tuning on a task's data set, and scoring a trained model."""

import os

from kbert.cli.arguments import (
    add_attention_dropout_argument,
    add_lora_arguments,
    add_backend_argument,
    add_command,
    add_data_file_arguments,
    add_quiet_argument,
    add_run_folder_arguments,
    add_strategy_arguments,
    add_subset_and_seed_arguments,
    class_name_list,
    data_file_columns,
    folder_of_the_out_file,
    open_fraction,
    positive_float,
    positive_int,
    replaced_output_lock,
    run_folder_lock,
    take_setting_defaults,
    verbosity,
)
from kbert.cli.model_files import add_base_argument, load_task_model


def add_conll_arguments(command):
    from kbert.data.conll import CONLL_SCHEMES

    command.add_argument("--tag-column", type=int, default=-1,
                         help="of a CoNLL file: the column of the tags, counted from 0 (the word), or from the "
                              "end when negative (default: the last)")
    command.add_argument("--scheme", choices=CONLL_SCHEMES, default="auto",
                         help="of a CoNLL file: its tag scheme (auto: IOB1, IOB2 or BIOES, as the tags say); "
                              "tags are kept in IOB2")


def add_commands(commands):
    from kbert.data.tfds_source import SOURCES  # plain Python: no TensorFlow
    from kbert.runs.fine_tuning_settings import FineTuningSettings
    from kbert.runs.own_data import TASK_TYPES
    from kbert.runs.recipes import RECIPES

    train = add_command(commands, "train", "fine-tune on your files or a named data set, evaluate, save", _train,
                        check=_check_train, lock=run_folder_lock,
                        interrupted="; run it again to start over (the logs so far are moved aside), or pass "
                                    "another --out.")
    take_setting_defaults(train, FineTuningSettings)
    train.add_argument("task", nargs="?", choices=sorted(RECIPES),
                       help="a named data set and its task; or give your own files with --train")
    add_data_file_arguments(train, {
        "--train": "train on this file: a classifier (labels as strings or integers), a tagger (a CoNLL "
                   "file, any tag set) or a question answerer (SQuAD-format JSON)",
        "--validation": "validate on this file (default: a stratified --validation-split of --train)",
        "--test": "score the model on this file (default: on the validation data)",
    })
    train.add_argument("--task-type", choices=TASK_TYPES,
                       help="what to fit on --train (default: tagging for CoNLL files (.conll, .iob, .bio, ...), "
                            "question-answering for SQuAD-format .json, else classification)")
    train.add_argument("--labels", type=class_name_list,
                       help="the class names (or tags) in id order, comma-separated (default: the training "
                            "file's labels, integers by value, else sorted)")
    add_conll_arguments(train)
    train.add_argument("--validation-split", type=open_fraction, default=0.1,
                       help="without --validation: the part of --train to validate on (seeded; stratified by class "
                            "for a classifier, whole articles for questions)")
    train.add_argument("--encoder",
                       help="a preset (tiny ... large), a checkpoint folder or name (all-minilm-l6-v2, "
                            "a Hugging Face id such as bert-base-uncased, a keras-hub preset such as "
                            "bert_base_en_uncased), a `kbert pretrain` run folder, or a .keras file")
    train.add_argument("--vocabulary", help="vocab.txt for a preset or .keras encoder "
                                            "(default for presets: bert-base-uncased's)")
    train.add_argument("--cased", action="store_true",
                       help="keep case and accents: the vocabulary (--vocabulary, or a pretraining "
                            "run's vocab.txt) is cased")
    add_run_folder_arguments(train)
    train.add_argument("--epochs", type=positive_int,
                       help="epochs to train (default: 3, or more on a small data set: at least 400 "
                            "updates, at most 20 epochs)")
    train.add_argument("--batch-size", type=positive_int,
                       help="examples per step, across all replicas and workers")
    train.add_argument("--sequence-length", type=positive_int,
                       help="default: 64 for short texts, 128 for pairs and NER, 384 for SQuAD")
    train.add_argument("--learning-rate", type=positive_float,
                       help="peak learning rate (default: 5e-5 for BERT-base, more for smaller "
                            "encoders; 75x with --lora-rank)")
    add_subset_and_seed_arguments(train, "fine-tune on a seeded random subset of this many training examples",
                                  "fixes the subset, order and weights")
    add_attention_dropout_argument(train)
    add_lora_arguments(train)
    train.add_argument("--packing", action="store_true",
                       help="pack several examples (question windows, choices) into each row of a batch, so "
                            "that a step computes less padding (the same examples per step)")
    train.add_argument("--source", choices=SOURCES,
                       help="local: the canonical files (offline); tfds: TensorFlow Datasets "
                            "(sst2, rte, mrpc, squad, conll2003; downloaded once)")
    add_quiet_argument(train)
    add_strategy_arguments(train)
    add_backend_argument(train)

    evaluate = add_command(commands, "evaluate", "a trained task model's metrics on a split", _evaluate,
                           check=_check_evaluate, output_folders=folder_of_the_out_file, lock=replaced_output_lock)
    evaluate.add_argument("model", help="the model.keras of `kbert train`, or its model.adapter (LoRA)")
    add_base_argument(evaluate)
    evaluate.add_argument("--task", choices=sorted(RECIPES),
                          help="the named data set the model was trained on")
    add_data_file_arguments(evaluate, {"--data": "score the model on this file of its task: labelled texts (CSV, "
                                                 "TSV, JSONL), a CoNLL file, or SQuAD-format JSON"})
    add_conll_arguments(evaluate)
    evaluate.add_argument("--split", default=None, help="default: the task's evaluation split")
    evaluate.add_argument("--max-examples", type=positive_int, default=None,
                          help="evaluate on the first this many examples")
    evaluate.add_argument("--source", choices=SOURCES, default="local",
                          help="where the data comes from, as for `kbert train`")
    evaluate.add_argument("--out", help="write the metrics to this JSON file")
    evaluate.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    add_backend_argument(evaluate)


def task_or_files(args):
    """The named task of a command, or its `--train` files (`kbert.runs.own_data.FileData`)."""
    if args.train is None:
        return args.task
    from kbert.runs.own_data import read_file_data

    return read_file_data(args.train, args.validation, args.test, columns=data_file_columns(args),
                          labels=getattr(args, "labels", None), validation_split=args.validation_split,
                          seed=args.seed, task_type=getattr(args, "task_type", None), tag_column=args.tag_column,
                          scheme=args.scheme)


def check_task_or_files(args, example):
    """A command takes a named data set or `--train FILE`, exactly one; the files are checked to exist."""
    from kbert.runs.outputs import check_input_file

    if (args.task is None) == (args.train is None):
        raise ValueError(f"Give a named data set ({example}) or your own file (--train FILE)"
                         + (", not both." if args.task else "."))
    for flag in ("train", "validation", "test"):
        if getattr(args, flag) is not None:
            check_input_file(getattr(args, flag), f"--{flag}")
    if args.task and (args.validation or args.test):
        raise ValueError("--validation and --test go with --train FILE; a named data set has its own.")


def _check_train(args):
    from kbert.runs.outputs import RUN_FILES, check_input_file, check_own_files

    check_own_files(args.out, RUN_FILES, "--out")

    if (args.task is None) == (args.train is None):
        raise ValueError("Give a named data set (kbert train sst2) or your own file (kbert train --train "
                         "FILE), not both." if args.task else "Give a named data set (kbert train sst2) or "
                         "your own file (kbert train --train FILE).")
    for flag in ("train", "validation", "test"):
        if getattr(args, flag) is not None:
            check_input_file(getattr(args, flag), f"--{flag}")
    if args.task and (args.validation or args.test or args.labels or args.task_type):
        raise ValueError("--validation, --test, --labels and --task-type go with --train FILE; a named data set "
                         "has its own.")


def _check_evaluate(args):
    from kbert.runs.outputs import check_input_file, check_output_file

    if (args.task is None) == (args.data is None):
        raise ValueError("Give the named data set (--task) or a labelled file (--data FILE) to score on"
                         + (", not both." if args.task else "."))
    if args.data is not None:
        check_input_file(args.data, "--data")
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
    from kbert.runs.fine_tuning_settings import FineTuningSettings

    settings = FineTuningSettings.from_flags(args, verbose=verbosity(args))  # checked before the folder
    task = task_or_files(args)
    start_run_folder(args, args.encoder, args.vocabulary)
    result = fine_tune(task, args.out, settings)
    print_metrics(result)
    print_saved(args.out)


def print_saved(out):
    """Where a run's model and metrics went, and how to compare it with the runs beside it."""
    from kbert.runs.outputs import RUN_ADAPTER

    # TensorBoard on the folder that holds the run compares it with the runs beside it.
    runs = os.path.dirname(os.path.normpath(out)) or "."
    adapter = os.path.join(out, RUN_ADAPTER)
    if os.path.exists(adapter):
        print(f"Saved {out}/model.keras, {adapter} (the LoRA adapters and head alone, for the same encoder) "
              f"and {out}/metrics.json.")
    else:
        print(f"Saved {out}/model.keras and {out}/metrics.json.")
    print(f"Compare it with the runs beside it: tensorboard --logdir {runs}")


def _evaluate(args):
    from kbert.io.atomic_files import json_text, remove_temporary_files, write_atomically, write_text
    from kbert.runs.fine_tuning import evaluate_task

    if args.out:  # under --out's lock: what a killed evaluate left beside it
        directory, name = os.path.split(os.path.abspath(args.out))
        remove_temporary_files(directory, [name])
    model = load_task_model(args.model, args.base)
    task = args.task
    if args.data is not None:
        from kbert.runs.own_data import read_evaluation_data

        task = read_evaluation_data(args.data, model, data_file_columns(args), args.tag_column, args.scheme)
    else:
        _check_trained_on(args.model, task)
    result = evaluate_task(model, task, split=args.split, max_examples=args.max_examples,
                           source=args.source)
    print_metrics(result)
    if args.out:
        write_atomically(args.out, lambda path: write_text(path, json_text(result)))
        print(f"Wrote {args.out}")


def _check_trained_on(model_path, task):
    """Refuses to score a model on a named data set when its run folder says it was trained on files."""
    import json

    metrics = os.path.join(os.path.dirname(os.path.abspath(model_path)), "metrics.json")
    try:
        with open(metrics, encoding="utf-8") as file:
            data = json.load(file).get("data")
    except (OSError, ValueError, AttributeError, RecursionError):
        return  # no run folder beside the model: nothing says what it was trained on
    if isinstance(data, dict):
        train = data.get("files", {}).get("train", {}).get("path", "files")
        raise ValueError(f"{model_path} was trained on your own files ({train}), not on {task}; score it on "
                         "a labelled file with --data FILE.")


def print_metrics(result):
    """A run's scores, one a line; a two-class task's precision, recall and F1 named with their class."""
    print(f"{result['task']} ({result['split']}, {result['examples']:,} examples):")
    from kbert.runs.recipes import CLASS_SCORES

    positive = result.get("positive_class")  # precision, recall and F1 are this class's
    scores = {f"{key} ({positive})" if positive and key in CLASS_SCORES else key: value
              for key, value in result.items() if isinstance(value, float)}
    width = max(map(len, scores), default=0)
    for label, value in scores.items():
        print(f"  {label:<{width}} {value:.4f}")
