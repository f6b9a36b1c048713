"""Small data sets: the default recipe's length before (3 epochs) and now (at least 400 updates).

A user's own data set is often small: 1,500 labelled texts, 1,000 tagged
sentences, 600 questions. For each, fine-tunes all-MiniLM-L6-v2 on a seeded
subset of that size with `kbert.runs.fine_tuning.fine_tune`, once with the
earlier default of 3 epochs and once with today's default (`epochs=None`:
`default_epochs`, at least `MIN_UPDATE_STEPS` updates), everything else the
defaults, and scores it on the task's evaluation split.

Prints a table and writes JSON (default `benchmarks/results/small_data.json`).

    .venv/bin/python benchmarks/small_data.py                      # SST-2 (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/small_data.py --tasks conll2003 squad
    .venv/bin/python benchmarks/small_data.py --tasks squad --recipes now
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
from kbert.runs.recipes import RECIPES, default_epochs  # noqa: E402

SIZES = {"sst2": 1500, "conll2003": 1000, "squad": 600}
EVAL_EXAMPLES = {"sst2": None, "conll2003": 1000, "squad": 500}
RECIPE_EPOCHS = {"before": 3, "now": None}
RECIPE_NAMES = {"before": "before: 3 epochs", "now": "now: default"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["sst2"], choices=sorted(SIZES))
    parser.add_argument("--encoder", default="all-minilm-l6-v2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recipes", nargs="+", default=sorted(RECIPE_EPOCHS), choices=sorted(RECIPE_EPOCHS),
                        help="which recipes to run (default: both)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "small_data.json"))
    args = parser.parse_args()
    results = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "runs": []}
    for task in args.tasks:
        for key in args.recipes:
            recipe, epochs = RECIPE_NAMES[key], RECIPE_EPOCHS[key]
            start = time.time()
            with tempfile.TemporaryDirectory() as out:
                result = fine_tune(task, out, encoder=args.encoder, epochs=epochs, max_examples=SIZES[task],
                                   max_eval_examples=EVAL_EXAMPLES[task], seed=args.seed, verbose=2)
            used = result["settings"]["epochs"]
            result.update(recipe=recipe, wall_seconds=time.time() - start, epochs_used=used,
                          updates=used * -(-result["train_examples"] // result["settings"]["batch_size"]))
            results["runs"].append(result)
            write_json(results, args.out)
    print_table(results)
    print(f"Wrote {args.out}")


def write_json(results, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as file:
        json.dump(results, file, indent=2, default=str)


def print_table(results):
    print("| task | training examples | recipe | epochs | updates | metric | value | wall time (min) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in results["runs"]:
        metric = RECIPES[run["task"]].metric
        print(f"| {run['task']} | {run['train_examples']:,} | {run['recipe']} | {run['epochs_used']} | "
              f"{run['updates']} | {metric} | {run[metric]:.4f} | {run['wall_seconds'] / 60:.1f} |")


if __name__ == "__main__":
    assert default_epochs(1500, 32) > 3
    main()
