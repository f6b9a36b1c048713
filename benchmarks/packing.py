"""Packed fine-tuning batches against kbert's length-grouped ones: epoch time and dev score.

all-MiniLM-L6-v2 fine-tuned on a seeded subset of a task's training split
(SST-2 and MRPC: a classifier; CoNLL-2003: a tagger; SQuAD: a question
answerer, its windows at 384 tokens), the same examples and seeds both ways:

- `grouped`: `fit` as kbert batches by default (examples grouped by length
  within 50 batches, each batch cut to its longest example);
- `packed`: `fit(..., packing=True)`: each batch's examples packed into
  rows of up to the sequence length, each computed as if alone
  (`kbert.preprocessing.packing`).

`--keras-hub` adds the peer: keras-hub's `BertTextClassifier` with its
default preprocessor (`BertTextClassifierPreprocessor`: every text padded
to 512 tokens) on the same weights (`Encoder.to_keras_hub`) and the same
examples, compiled as keras-hub compiles it; its rows give the time per
training example, beside kbert's (SST-2 only, 2 epochs of `--peer-examples`
sentences: at 512 tokens the whole subset would take an hour).

Each run is a process of its own on the backend asked for. An epoch's wall
time is taken by a callback; the table gives the mean of the epochs after
the first (which traces or compiles the step) and the score after the
last epoch on the task's evaluation split (`kbert train`'s: SST-2's and
MRPC's dev split; CoNLL-2003's test split; for SQuAD, 1,000 questions
drawn with seed 0 from the part of v1.1's dev set that `kbert train squad`
holds out). The machine's float32 matmul peak is measured
in the same run. Writes `benchmarks/results/packing.json`.

    .venv/bin/python benchmarks/packing.py                                   # SST-2 and MRPC, 3 seeds, TensorFlow
    .venv/bin/python benchmarks/packing.py --tasks conll2003 squad --epochs 2 --seeds 0
    .venv/bin/python benchmarks/packing.py --tasks sst2 --epochs 2 --seeds 0 --keras-hub
    .venv/bin/python benchmarks/packing.py --backends jax torch --seeds 0    # the other backends' speed
    .venv/bin/python benchmarks/packing.py --tasks sst2 --max-examples 256 --epochs 2 --seeds 0   # a quick look
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from timing import cpu_model, write_json

RESULTS = Path(__file__).parent / "results"
BACKENDS = ("tensorflow", "jax", "torch")
TASKS = {
    "sst2": {"max_examples": 2000, "sequence_length": 64},
    "mrpc": {"max_examples": 1500, "sequence_length": 128},
    "conll2003": {"max_examples": 2000, "sequence_length": 128},
    "squad": {"max_examples": 1000, "sequence_length": 384, "max_eval_examples": 1000},
}
WAYS = ("grouped", "packed")


def epoch_timer(times):
    """A Keras callback that appends each epoch's wall time (seconds) to `times`."""
    import keras

    class EpochTimes(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    return EpochTimes()


def run_worker(task, way, seed, max_examples, epochs, sequence_length, max_eval_examples=None):
    """In a fresh process on KERAS_BACKEND: epoch times and the evaluation score of one fine-tuning run."""
    import keras

    from kbert.runs.fine_tuning import build_task_model, evaluate_task, load_split, sample_examples
    from kbert.runs.recipes import recipe

    x, y = sample_examples(*load_split(task, "train"), max_examples, seed)
    keras.utils.set_random_seed(seed)
    model = build_task_model(task, "all-minilm-l6-v2", sequence_length=sequence_length)
    times = []
    model.fit(x, y, epochs=epochs, batch_size=32, verbose=0, callbacks=[epoch_timer(times)],
              **({"packing": True} if way == "packed" else {}))
    metric = recipe(task)[1].metric
    report = evaluate_task(model, task, max_examples=max_eval_examples)
    return {"epoch_seconds": times, "dev_score": report[metric], "metric": metric,
            "examples": len(y) if y is not None else len(x), "eval_examples": report["examples"]}


def keras_hub_worker(task, seed, max_examples, epochs):
    """In a fresh process: epoch times of keras-hub's `BertTextClassifier`, default preprocessor, kbert's weights."""
    import keras
    import keras_hub

    import kbert
    from kbert.runs.fine_tuning import load_split, sample_examples

    x, y = sample_examples(*load_split(task, "train"), max_examples, seed)
    keras.utils.set_random_seed(seed)
    encoder, tokenizer = kbert.load_pretrained("all-minilm-l6-v2")
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub.models.BertTokenizer(vocabulary=list(tokenizer.vocabulary), lowercase=tokenizer.lowercase))
    classifier = keras_hub.models.BertTextClassifier(encoder.to_keras_hub(), num_classes=2, preprocessor=preprocessor)
    times = []
    classifier.fit(list(x), list(y), epochs=epochs, batch_size=32, verbose=0, callbacks=[epoch_timer(times)])
    return {"epoch_seconds": times, "examples": len(y), "sequence_length": preprocessor.sequence_length}


def peak_worker():
    """In a fresh process: the machine's float32 matmul peak (GFLOP/s), measured with TensorFlow."""
    import tensorflow as tf

    from timing import matmul_gflops

    return matmul_gflops(tf, 2048, 768, tf.float32)


def in_process(backend, function, *arguments):
    environment = {**os.environ, "KERAS_BACKEND": backend}
    result = subprocess.run([sys.executable, __file__, "--worker", function, json.dumps(arguments)],
                            env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{function}{arguments} on {backend} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["tensorflow"])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["sst2", "mrpc"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-examples", type=int,
                        help="default: 2,000 for SST-2 and CoNLL-2003, 1,500 for MRPC, 1,000 for SQuAD")
    parser.add_argument("--keras-hub", action="store_true",
                        help="also time keras-hub's BertTextClassifier with its default preprocessor (SST-2)")
    parser.add_argument("--peer-examples", type=int, default=320, help="training sentences of the keras-hub runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "packing.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(globals()[args.worker](*json.loads(args.arguments))))
        return

    report = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"), "cpu": cpu_model(),
              "cores": os.cpu_count(), "matmul_peak_gflops": in_process("tensorflow", "peak_worker"),
              "epochs": args.epochs, "batch_size": 32, "runs": []}
    for backend in args.backends:
        for task in args.tasks:
            budget = TASKS[task]
            examples = args.max_examples or budget["max_examples"]
            for seed in args.seeds:
                for way in WAYS:
                    run = in_process(backend, "run_worker", task, way, seed, examples, args.epochs,
                                     budget["sequence_length"], budget.get("max_eval_examples"))
                    report["runs"].append({"backend": backend, "task": task, "way": way, "seed": seed, **run})
                    write_json(args.out, report)
                    print(f"{backend} {task} seed {seed} {way}: epochs {[round(t, 1) for t in run['epoch_seconds']]} s, "
                          f"dev {run['metric']} {run['dev_score']:.4f}", flush=True)
    if args.keras_hub:
        for backend in args.backends:
            for seed in args.seeds:
                run = in_process(backend, "keras_hub_worker", "sst2", seed, args.peer_examples, args.epochs)
                report["peer_runs"] = [*report.get("peer_runs", []), {"backend": backend, "seed": seed, **run}]
                write_json(args.out, report)
    report["table"] = table(report["runs"])
    report["per_example"] = per_example(report)
    write_json(args.out, report)
    print(f"\n{report['cpu']}, {report['cores']} cores; float32 matmul peak "
          f"{report['matmul_peak_gflops']['matmul']:.0f} GFLOP/s; {report['date']}")
    print(f"{'backend':<11} {'task':<9} {'way':<8} {'epoch s':>8} {'speed-up':>8} {'score':>16}")
    for row in report["table"]:
        print(f"{row['backend']:<11} {row['task']:<9} {row['way']:<8} {row['epoch_seconds']:8.1f} "
              f"{row['speed_up']:8.2f} {row['dev_mean']:9.4f} ± {row['dev_half_range']:.4f}")
    if report["per_example"]:
        print(f"\n{'backend':<11} {'model':<26} {'ms per training example':>24} {'kbert packed faster':>20}")
        for row in report["per_example"]:
            print(f"{row['backend']:<11} {row['model']:<26} {row['milliseconds']:24.1f} {row['kbert_speed_up']:20.2f}")


def per_example(report):
    """Per backend: SST-2's steady milliseconds per training example, kbert's ways and keras-hub's, and kbert packed's speed-up."""
    rows = []
    for backend in dict.fromkeys(run["backend"] for run in report.get("peer_runs", [])):
        def milliseconds(runs):
            return statistics.mean(1000 * statistics.mean(run["epoch_seconds"][1:] or run["epoch_seconds"])
                                   / run["examples"] for run in runs)

        mine = {way: [run for run in report["runs"] if (run["backend"], run["task"], run["way"]) ==
                      (backend, "sst2", way)] for way in WAYS}
        peer = milliseconds([run for run in report["peer_runs"] if run["backend"] == backend])
        packed = milliseconds(mine["packed"]) if mine["packed"] else None
        for model, value in [*((f"kbert {way}", milliseconds(runs)) for way, runs in mine.items() if runs),
                             ("keras-hub BertTextClassifier", peer)]:
            rows.append({"backend": backend, "model": model, "milliseconds": value,
                         "kbert_speed_up": value / packed if packed else float("nan")})
    return rows


def table(runs):
    """Per backend, task and way: the steady epoch time (epochs after the first), its speed-up, the dev score's mean ± half range."""
    rows = []
    for backend, task in dict.fromkeys((run["backend"], run["task"]) for run in runs):
        grouped_seconds = None
        for way in WAYS:
            mine = [run for run in runs if (run["backend"], run["task"], run["way"]) == (backend, task, way)]
            if not mine:
                continue
            seconds = statistics.mean(statistics.mean(run["epoch_seconds"][1:] or run["epoch_seconds"])
                                      for run in mine)
            grouped_seconds = grouped_seconds or seconds
            scores = [run["dev_score"] for run in mine]
            rows.append({"backend": backend, "task": task, "way": way, "epoch_seconds": seconds,
                         "speed_up": grouped_seconds / seconds, "dev_mean": statistics.mean(scores),
                         "dev_half_range": (max(scores) - min(scores)) / 2, "seeds": len(mine)})
    return rows


if __name__ == "__main__":
    main()
