"""LoRA against full fine-tuning: step time, peak memory, trained weights, adapter size, dev scores.

Three parts, each a table and a JSON file (default `benchmarks/results/lora*.json`):

- `--speed`: a BERT-base classifier's training step (batch 8 x 128 tokens of
  token ids, `train_on_batch`, the loss read each step) and the peak resident
  memory of a process that builds it and trains it, full fine-tuning against
  LoRA at rank 8 (on query and value, kbert's default, and on all six
  projections), on each backend. Each measurement is a
  process of its own, so peaks do not mix.
- `--size`: trained weights, the `.keras` file and the adapter file of the
  same BERT-base classifier.
- `--quality`: dev scores of all-MiniLM-L6-v2 fine-tuned on SST-2, MRPC and
  CoNLL-2003 (seeded subsets, as `kbert train` runs them:
  `kbert.runs.fine_tuning.fine_tune`), full against LoRA at rank 8 (both
  target sets) with each one's default learning rate, over seeds.

    .venv/bin/python benchmarks/lora.py --speed      # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/lora.py --size       # about 1 minute
    .venv/bin/python benchmarks/lora.py --quality    # about 70 minutes on 2 cores
    .venv/bin/python benchmarks/lora.py --quality --variants full lora   # about 45 minutes
    .venv/bin/python benchmarks/lora.py --quality --tasks mrpc --seeds 0
    .venv/bin/python benchmarks/lora.py --quality --variants lora --lora-epochs 4 --out lora4.json
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import cpu_model, timed, write_json

RESULTS = Path(__file__).parent / "results"
BACKENDS = ("tensorflow", "jax", "torch")
# LoRA at rank 8 on the query and value projections (the default), and on all six.
VARIANTS = {"full": {}, "lora": {"lora_rank": 8}, "lora-all": {"lora_rank": 8, "lora_targets": "all"}}
BATCH, LENGTH, VOCABULARY_SIZE = 8, 128, 30522
# Seeded subsets of the training splits, whole dev splits; the same for both variants.
BUDGETS = {
    "sst2": {"max_examples": 2000, "epochs": 3, "sequence_length": 64},
    "mrpc": {"max_examples": 1500, "epochs": 3, "sequence_length": 128},
    "conll2003": {"max_examples": 1500, "epochs": 3, "sequence_length": 128, "max_eval_examples": 1000},
}


def speed_worker(variant):
    """In a fresh process on KERAS_BACKEND: step time, peak and built memory, weights of one variant."""
    import numpy as np

    import kbert  # noqa: F401 (registers kbert, sets TensorFlow's switches before it loads)
    import keras
    from kbert.models.classifier import Classifier
    from kbert.models.encoder import Encoder

    keras.utils.set_random_seed(0)
    encoder = Encoder.from_preset("base", vocabulary_size=VOCABULARY_SIZE)
    model = Classifier(encoder, num_classes=2)
    if variant != "full":
        model.enable_lora(8, targets=VARIANTS[variant].get("lora_targets"))
    built_rss = _peak_rss_mb()
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, VOCABULARY_SIZE, (BATCH, LENGTH)).astype("int32"),
         "segment_ids": np.zeros((BATCH, LENGTH), "int32"), "padding_mask": np.ones((BATCH, LENGTH), "int32")}
    y = rng.integers(0, 2, BATCH).astype("int32")
    seconds, steps = _time_steps(model, x, y)
    trained = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return {"step_seconds": seconds, "steps": steps, "peak_rss_mb": _peak_rss_mb(), "built_rss_mb": built_rss,
            "trained_weights": trained, "weights": model.count_params()}


def _time_steps(model, x, y):
    def step():
        loss = model.train_on_batch(x, y, return_dict=True)["loss"]
        float(loss)  # the loss read each step, as a progress bar reads it

    return timed(step, warmup=2, budget_seconds=30, min_steps=5)


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_worker():
    """In a fresh process: the machine's float32 matmul peak (GFLOP/s), measured with TensorFlow."""
    import kbert  # noqa: F401 (TensorFlow's oneDNN switch before it loads)
    import tensorflow as tf

    from timing import matmul_gflops

    return matmul_gflops(tf, 4096, 768, "float32")


def run_speed(args):
    report = _report(args, "speed")
    report.update(batch=BATCH, sequence_length=LENGTH, preset="base")
    process = subprocess.run([sys.executable, __file__, "--peak-worker"], capture_output=True, text=True,
                             env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    report["matmul_gflops"] = json.loads(process.stdout.splitlines()[-1])
    for backend in args.backends:
        for variant in VARIANTS:
            env = {**os.environ, "KERAS_BACKEND": backend}
            process = subprocess.run([sys.executable, __file__, "--speed-worker", variant], env=env,
                                     capture_output=True, text=True)
            if process.returncode:
                raise SystemExit(f"{backend} {variant} failed:\n{process.stderr[-4000:]}")
            row = {"backend": backend, "variant": variant, **json.loads(process.stdout.splitlines()[-1])}
            report["rows"].append(row)
            write_json(args.out or RESULTS / "lora_speed.json", report)
            print(f"{backend} {variant}: {row['step_seconds']:.3f} s/step, peak {row['peak_rss_mb']:.0f} MB",
                  flush=True)
    lines = [f"{'backend':<11} {'variant':<9} {'s/step':>7} {'speedup':>8} {'peak MB':>8} {'lower':>6} "
             f"{'trained':>11}"]
    for backend in args.backends:
        rows = {row["variant"]: row for row in report["rows"] if row["backend"] == backend}
        for variant, row in rows.items():
            speedup = rows["full"]["step_seconds"] / row["step_seconds"]
            lower = 1 - row["peak_rss_mb"] / rows["full"]["peak_rss_mb"]
            lines.append(f"{backend:<11} {variant:<9} {row['step_seconds']:>7.3f} {speedup:>7.2f}x "
                         f"{row['peak_rss_mb']:>8.0f} {lower:>6.0%} {row['trained_weights']:>11,}")
    lines.append(f"float32 matmul peak (TensorFlow, 4096x768 by 768x3072): {report['matmul_gflops']['matmul']:.0f} "
                 "GFLOP/s")
    _finish(report, lines, args.out or RESULTS / "lora_speed.json")


def run_size(args):
    import kbert  # noqa: F401
    import numpy as np
    from kbert.models.classifier import Classifier
    from kbert.models.encoder import Encoder

    report = _report(args, "size")
    for name, variant in VARIANTS.items():
        model = Classifier(Encoder.from_preset("base", vocabulary_size=VOCABULARY_SIZE), num_classes=2)
        if variant:
            model.enable_lora(variant["lora_rank"], targets=variant.get("lora_targets"))
        with tempfile.TemporaryDirectory() as folder:
            model.save(os.path.join(folder, "model.keras"))
            row = {"variant": name, "keras_file_bytes": os.path.getsize(os.path.join(folder, "model.keras")),
                   "trained_weights": sum(int(np.prod(v.shape)) for v in model.trainable_variables),
                   "weights": model.count_params()}
            if variant:
                row["adapter_file_bytes"] = os.path.getsize(model.save_adapter(os.path.join(folder, "a.adapter")))
        report["rows"].append(row)
    full = report["rows"][0]
    lines = [f"{'variant':<9} {'trained weights':>16} {'share':>7} {'.keras MB':>10} {'adapter MB':>11} "
             f"{'of full':>8}"]
    for row in report["rows"]:
        adapter = row.get("adapter_file_bytes")
        adapter_mb = "" if adapter is None else f"{adapter / 1e6:.2f}"
        of_full = "" if adapter is None else f"{adapter / full['keras_file_bytes']:.2%}"
        lines.append(f"{row['variant']:<9} {row['trained_weights']:>16,} "
                     f"{row['trained_weights'] / full['weights']:>7.2%} {row['keras_file_bytes'] / 1e6:>10.1f} "
                     f"{adapter_mb:>11} {of_full:>8}")
    _finish(report, lines, args.out or RESULTS / "lora_size.json")


def run_quality(args):
    from kbert.runs.fine_tuning import fine_tune
    from kbert.runs.recipes import RECIPES

    report = _report(args, "quality")
    report.update(encoder=args.encoder, budgets=BUDGETS)
    out_path = args.out or RESULTS / "lora_quality.json"
    for task in args.tasks:
        for seed in args.seeds:
            for name in args.variants:
                variant = VARIANTS[name]
                start = time.time()
                budget = dict(BUDGETS[task])
                if name != "full" and args.lora_epochs:
                    budget["epochs"] = args.lora_epochs
                with tempfile.TemporaryDirectory() as out:
                    result = fine_tune(task, out, encoder=args.encoder, seed=seed, verbose=0, **variant, **budget)
                metric = RECIPES[task].metric
                row = {"task": task, "seed": seed, "variant": name, "metric": metric, "value": result[metric],
                       "learning_rate": result["settings"]["learning_rate"], "epochs": budget["epochs"],
                       "train_seconds": result["train_seconds"], "wall_seconds": time.time() - start}
                report["rows"].append(row)
                write_json(out_path, report)
                print(f"{task} seed {seed} {name}: {metric} {row['value']:.4f} "
                      f"(train {row['train_seconds']:.0f} s)", flush=True)
    lines = [f"{'task':<10} {'variant':<9} {'metric':<9} {'mean ± half range':>18} {'of full':>8} "
             f"{'train s':>8} {'faster':>7}"]
    for task in args.tasks:
        rows = [row for row in report["rows"] if row["task"] == task]
        means, times = {}, {}
        for name in args.variants:
            values = [row["value"] for row in rows if row["variant"] == name]
            means[name] = statistics.mean(values)
            times[name] = statistics.mean(row["train_seconds"] for row in rows if row["variant"] == name)
            spread = (max(values) - min(values)) / 2
            # Without a full run in this report (--variants lora), the columns against full stay empty.
            of_full = f"{means[name] / means['full']:>8.1%}" if "full" in means else f"{'':>8}"
            faster = f"{times['full'] / times[name]:>6.2f}x" if "full" in times else ""
            lines.append(f"{task:<10} {name:<9} {rows[0]['metric']:<9} {means[name]:>9.4f} ± {spread:.4f} "
                         f"{of_full} {times[name]:>8.0f} {faster}")
    _finish(report, lines, out_path)


def _report(args, part):
    return {"part": part, "command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
            "cpu": cpu_model(), "cores": os.cpu_count(), "rows": []}


def _finish(report, lines, path):
    report["table"] = lines
    write_json(path, report)
    print()
    print("\n".join(lines))
    print(f"\n{report['cpu']}, {report['cores']} cores, {report['date']}; written to {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = parser.add_mutually_exclusive_group(required=True)
    parts.add_argument("--speed", action="store_true", help="step time and peak memory, full against LoRA")
    parts.add_argument("--size", action="store_true", help="trained weights and file sizes")
    parts.add_argument("--quality", action="store_true", help="dev scores, full against LoRA, over seeds")
    parts.add_argument("--speed-worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parts.add_argument("--peak-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--encoder", default="all-minilm-l6-v2", help="--quality's encoder")
    parser.add_argument("--tasks", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="--quality's variants (full first)")
    parser.add_argument("--lora-epochs", type=int,
                        help="--quality's epochs for the LoRA variants (default: the task's, as in full); "
                             "LoRA's faster steps train 4 epochs in about full fine-tuning's time for 3")
    parser.add_argument("--out", type=Path, help="the JSON file (default: benchmarks/results/lora_<part>.json)")
    args = parser.parse_args()
    if args.speed_worker:
        print(json.dumps(speed_worker(args.speed_worker)))
    elif args.peak_worker:
        print(json.dumps(peak_worker()))
    elif args.speed:
        run_speed(args)
    elif args.size:
        run_size(args)
    else:
        run_quality(args)


if __name__ == "__main__":
    main()
