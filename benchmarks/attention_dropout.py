"""Does fine-tuning with attention dropout 0 keep BERT's quality? SST-2 and MRPC dev, a few seeds, 0.1 against 0.

`attention_dropout=0` lets training attend through the backend's fused
kernel (cuDNN's on a JAX GPU, PyTorch's scaled-dot-product attention);
MosaicBERT and ModernBERT train so. This fine-tunes the same encoder on the
same seeded subsets with both rates (the other dropout stays 0.1) and scores
each task's dev split with `kbert.runs.fine_tuning.fine_tune`, as `kbert train`
does. Prints a table (each seed, the mean and the spread) and writes JSON
row by row (default `benchmarks/results/attention_dropout.json`).

`--kernels` compares instead how attention dropout 0.1 is computed on
PyTorch: by the fused kernel (`scaled_dot_product_attention`'s
`dropout_p`, kbert's default there) against the explicit path (scores,
softmax, Keras' `Dropout`), same seeds and subsets.

    .venv/bin/python benchmarks/attention_dropout.py                    # about 25 minutes on 2 cores
    .venv/bin/python benchmarks/attention_dropout.py --tasks mrpc --out benchmarks/results/attention_dropout_mrpc.json
    .venv/bin/python benchmarks/attention_dropout.py --seeds 0 --tasks sst2
    KERAS_BACKEND=torch .venv/bin/python benchmarks/attention_dropout.py --kernels --tasks sst2 \
        --out benchmarks/results/attention_dropout_kernels.json
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from kbert.runs.fine_tuning import fine_tune  # noqa: E402
from kbert.runs.recipes import RECIPES  # noqa: E402
from timing import cpu_model, write_json  # noqa: E402

# Short budgets: seeded subsets of the training splits, whole dev splits.
BUDGETS = {
    "sst2": {"max_examples": 3000, "epochs": 1, "sequence_length": 64},
    "mrpc": {"max_examples": 1500, "epochs": 3, "sequence_length": 128},
}
RATES = (0.1, 0.0)
# --kernels: attention dropout 0.1 through each of PyTorch's two computations.
KERNELS = ("fused", "explicit")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="all-minilm-l6-v2", help="a checkpoint (folder or name) or a preset")
    parser.add_argument("--tasks", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--kernels", action="store_true",
                        help="attention dropout 0.1, PyTorch's fused kernel against the explicit path")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "attention_dropout.json")
    args = parser.parse_args()
    if args.kernels and os.environ["KERAS_BACKEND"] != "torch":
        parser.error("--kernels compares PyTorch's two computations: run it with KERAS_BACKEND=torch")
    variants = [(0.1, kernel) for kernel in KERNELS] if args.kernels else [(rate, None) for rate in RATES]
    report = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
              "cpu": cpu_model(), "cores": os.cpu_count(), "encoder": args.encoder, "budgets": BUDGETS,
              "backend": os.environ["KERAS_BACKEND"], "rows": []}
    for task in args.tasks:
        for seed in args.seeds:
            for rate, kernel in variants:
                start = time.time()
                with tempfile.TemporaryDirectory() as out, attention_computed_by(kernel):
                    result = fine_tune(task, out, encoder=args.encoder, seed=seed, attention_dropout=rate, verbose=2,
                                       **BUDGETS[task])
                row = {"task": task, "seed": seed, "attention_dropout": rate, "kernel": kernel,
                       "metric": RECIPES[task].metric, "value": result[RECIPES[task].metric],
                       "accuracy": result.get("accuracy"), "wall_seconds": time.time() - start}
                report["rows"].append(row)
                write_json(args.out, report)
                print(f"{task} seed {seed} attention_dropout {rate} {kernel or ''}: "
                      f"{row['metric']} {row['value']:.4f}", flush=True)
    print()
    print(table(report))
    print(f"\nwritten to {args.out}")


@contextlib.contextmanager
def attention_computed_by(kernel):
    """On PyTorch, `"explicit"` keeps dropping attention off the fused kernel for the run; else as kbert does."""
    if kernel != "explicit":
        yield
        return
    from kbert.backend import torch as torch_backend

    fused = torch_backend.dot_product_attention

    def fused_unless_dropping(query, key, value, padding_mask, dropout, training):
        if training and dropout.rate > 0:
            return None  # `portable.explicit_attention` runs
        return fused(query, key, value, padding_mask, dropout, training)

    torch_backend.dot_product_attention = fused_unless_dropping
    try:
        yield
    finally:
        torch_backend.dot_product_attention = fused


def table(report):
    """Per task and variant (rate, kernel): each seed's dev metric, their mean and their spread (max - min)."""
    lines = [f"{report['encoder']}, budgets {report['budgets']}; {report.get('backend', 'tensorflow')}; "
             f"{report['cpu']}, {report['date']}",
             "| task | metric | attention dropout | seeds | mean | spread |", "|---|---|---:|---|---:|---:|"]
    for task in dict.fromkeys(row["task"] for row in report["rows"]):
        for variant in dict.fromkeys((row["attention_dropout"], row.get("kernel")) for row in report["rows"]):
            rows = [row for row in report["rows"] if row["task"] == task
                    and (row["attention_dropout"], row.get("kernel")) == variant]
            if not rows:
                continue
            values = [row["value"] for row in rows]
            rate = f"{variant[0]} ({variant[1]})" if variant[1] else variant[0]
            lines.append(f"| {task} | {rows[0]['metric']} | {rate} | "
                         + ", ".join(f"{value:.4f}" for value in values)
                         + f" | {statistics.mean(values):.4f} | {max(values) - min(values):.4f} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
