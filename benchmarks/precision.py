"""Does bf16 fine-tuning reach float32's accuracy? SST-2, same data, seeds and recipe.

Fine-tunes a classifier from a pretrained encoder (default all-MiniLM-L6-v2)
on a seeded subset of SST-2 train, once per precision and seed: float32 and
`mixed_bfloat16` (kbert's `dtype=` switch). Prints the GLUE dev accuracy of
each run, the spread across seeds at one precision (the noise) beside the
gap between precisions, and training examples/s; writes JSON.

    .venv/bin/python benchmarks/precision.py                  # about 15 minutes on 2 cores
    .venv/bin/python benchmarks/precision.py --examples 256   # a smoke run
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import kbert  # noqa: E402  (before keras: it sets TensorFlow's switches)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from kbert.io.atomic_files import write_atomically  # noqa: E402
from kbert.runs.fine_tuning import sample_examples  # noqa: E402

PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="all-minilm-l6-v2", help="a checkpoint folder or name")
    parser.add_argument("--examples", type=int, default=3000, help="SST-2 training sentences")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "precision.json"))
    args = parser.parse_args()

    train_texts, train_labels = kbert.data.load_glue("sst2", "train")
    dev_texts, dev_labels = kbert.data.load_glue("sst2", "dev")
    report = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "runs": []}
    for seed in args.seeds:
        texts, labels = sample_examples(train_texts, train_labels, args.examples, seed)
        for precision in args.precisions:
            keras.utils.set_random_seed(seed)
            model = kbert.classifier(args.encoder, num_classes=2, sequence_length=args.sequence_length,
                                     dtype=PRECISIONS[precision])
            start = time.time()
            model.fit(texts, np.asarray(labels), epochs=args.epochs, batch_size=args.batch_size, verbose=0)
            seconds = time.time() - start
            accuracy = float(np.mean(model.predict(dev_texts, verbose=0).argmax(-1) == np.asarray(dev_labels)))
            run = {"precision": precision, "seed": seed, "dev_accuracy": accuracy,
                   "examples_per_second": len(texts) * args.epochs / seconds, "seconds": seconds}
            report["runs"].append(run)
            print(f"{precision} seed {seed}: dev accuracy {accuracy:.4f}, "
                  f"{run['examples_per_second']:.1f} examples/s", flush=True)

    report["summary"] = summarize(report["runs"], args.precisions)
    print_table(report["summary"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # A whole report or the old one, never half of one.
    write_atomically(str(out), lambda path: Path(path).write_text(json.dumps(report, indent=2) + "\n"))
    print(f"JSON in {out}")


def summarize(runs, precisions):
    summary = {}
    for precision in precisions:
        accuracies = [r["dev_accuracy"] for r in runs if r["precision"] == precision]
        rates = [r["examples_per_second"] for r in runs if r["precision"] == precision]
        summary[precision] = {
            "mean_dev_accuracy": statistics.mean(accuracies),
            "seed_spread": max(accuracies) - min(accuracies),
            "median_examples_per_second": statistics.median(rates),
        }
    if len(precisions) == 2:
        first, second = (summary[p]["mean_dev_accuracy"] for p in precisions)
        summary["gap"] = second - first
    return summary


def print_table(summary):
    print("| precision | mean dev accuracy | spread across seeds | examples/s |")
    print("| --- | --- | --- | --- |")
    for precision, row in summary.items():
        if precision != "gap":
            print(f"| {precision} | {row['mean_dev_accuracy']:.4f} | {row['seed_spread']:.4f} | "
                  f"{row['median_examples_per_second']:.1f} |")
    if "gap" in summary:
        print(f"Gap between precisions: {summary['gap']:+.4f}")


if __name__ == "__main__":
    main()
