"""Task quality: fine-tune each task model with a fixed budget and score it the way its community does.

For every task in `kbert.runs.recipes.RECIPES` (SST-2, SMS Spam, RTE, MRPC,
SICK, SQuAD, CoNLL-2003, CoLA, STS-B, WNLI), fine-tunes from the best encoder the project has
(default: the published all-MiniLM-L6-v2 weights, `--encoder` to change) on
a seeded random subset of the training split, then evaluates on the task's
evaluation split. SQuAD: only the v1.1 dev file is available offline, so it
trains on dev articles 0-37 and evaluates on articles 38-47.

Prints a table (task, data, split, metric, value, examples seen, wall time)
and writes JSON (default `benchmarks/results/tasks.json`).

    .venv/bin/python benchmarks/tasks.py                   # about an hour on 2 cores
    .venv/bin/python benchmarks/tasks.py --quick           # minutes: a smoke run
    .venv/bin/python benchmarks/tasks.py --tasks sst2 rte  # some tasks only
"""

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from kbert.runs.fine_tuning import fine_tune  # noqa: E402
from kbert.runs.recipes import RECIPES  # noqa: E402

# Training examples per task (a seeded subset), epochs and sequence length:
# the fixed budget. Small data sets are used whole. Listed in the order they
# run: the quick ones first.
BUDGETS = {
    "sst2": {"max_examples": 16000, "epochs": 1, "sequence_length": 64},
    "sms_spam": {"max_examples": None, "epochs": 2, "sequence_length": 64},
    "sick": {"max_examples": None, "epochs": 2, "sequence_length": 64},
    "conll2003": {"max_examples": 4000, "epochs": 2, "sequence_length": 128},
    "mrpc": {"max_examples": None, "epochs": 3, "sequence_length": 128},
    "rte": {"max_examples": None, "epochs": 3, "sequence_length": 128},
    "squad": {"max_examples": 2000, "epochs": 2, "sequence_length": 256},
    "wnli": {"max_examples": None, "epochs": 3, "sequence_length": 128},
    "cola": {"max_examples": None, "epochs": 2, "sequence_length": 64},
    "stsb": {"max_examples": None, "epochs": 2, "sequence_length": 128},
}
QUICK = {"max_examples": 64, "epochs": 1, "max_eval_examples": 64}
DATA = {
    "sst2": "GLUE SST-2", "sms_spam": "SMS Spam, fixed 80/20", "rte": "GLUE RTE",
    "mrpc": "GLUE MRPC", "sick": "SICK (SemEval split)",
    "squad": "SQuAD v1.1 dev, articles 0-37 / 38-47", "conll2003": "CoNLL-2003 English",
    "cola": "GLUE CoLA", "stsb": "GLUE STS-B", "wnli": "GLUE WNLI",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, default_tasks=list(BUDGETS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "tasks.json"))
    args = parser.parse_args()
    results = run_tasks(args, BUDGETS)
    print_table(results, args)
    print(f"Wrote {args.out}")


def add_arguments(parser, default_tasks):
    parser.add_argument("--encoder", default="all-minilm-l6-v2",
                        help="a checkpoint (folder or name), a preset, or a `kbert pretrain` run folder")
    parser.add_argument("--tasks", nargs="*", default=default_tasks, choices=list(RECIPES),
                        help="tasks to run (none: only what follows them, e.g. the side by side)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="peak fine-tuning rate (default: each model's rule for the encoder width)")
    parser.add_argument("--quick", action="store_true", help="64 examples, 1 epoch: a smoke run")
    parser.add_argument("--seed", type=int, default=0)


def run_tasks(args, budgets, results=None):
    """Fine-tunes and scores every task of `args.tasks` with its budget; writes `args.out` after each."""
    results = results or {"settings": vars(args), "machine": platform.processor() or platform.machine(),
                          "cpus": os.cpu_count(), "tasks": {}}
    for task in args.tasks:
        budget = dict(budgets[task], **(QUICK if args.quick else {}))
        print(f"== {task}: {budget}", flush=True)
        start = time.time()
        with tempfile.TemporaryDirectory() as out:
            result = fine_tune(task, out, encoder=args.encoder, batch_size=args.batch_size,
                               learning_rate=args.learning_rate, seed=args.seed, verbose=2, **budget)
        result["wall_seconds"] = time.time() - start
        result["examples_seen"] = result["train_examples"] * budget["epochs"]
        results["tasks"][task] = result
        write_json(results, args.out)
    return results


def write_json(results, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=2) + "\n")


def metric_value(task, result):
    """The task's headline metric as the table shows it (SQuAD: EM / F1, in %)."""
    if task == "squad":
        return f"EM {result['exact_match']:.1f} / F1 {result['f1']:.1f}"
    if task == "stsb":
        return f"{result['pearson']:.4f} / {result['spearman']:.4f}"
    return f"{result[RECIPES[task].metric]:.4f}"


def metric_name(task):
    names = {"f1": "entity F1" if task == "conll2003" else "F1", "matthews_correlation": "MCC",
             "pearson": "Pearson / Spearman"}
    return names.get(RECIPES[task].metric, RECIPES[task].metric)


def print_table(results, args):
    print()
    print(f"Encoder: {args.encoder}" + (" (quick run)" if args.quick else ""))
    print("| task | data | split | metric | value | examples seen | wall time (min) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for task, result in results["tasks"].items():
        print(f"| {task} | {DATA[task]} | {result['split']} | {metric_name(task)} | "
              f"{metric_value(task, result)} | {result['examples_seen']:,} | "
              f"{result['wall_seconds'] / 60:.1f} |")


if __name__ == "__main__":
    main()
