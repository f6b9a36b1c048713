"""How does pretraining scale across workers, and does the input pipeline stay flat as the corpus grows?

1. Throughput: BERT-mini pretraining (MLM + NSP) as one worker and as two
   workers (`MultiWorkerMirroredStrategy` on 127.0.0.1, TF_CONFIG per
   process), each worker pinned to one CPU core with one TensorFlow thread,
   each worker's batch the same (so two workers train a global batch twice
   as large). Reports examples/s over the timed steps (after warm-up steps).
2. Communication: in the two-worker run, the time of an all-reduce of
   gradient-sized tensors (every trainable variable, the bytes a step
   sends), timed alone in a `tf.function` the same way, and its share of a
   step.
3. A model for N machines: step time = compute + ring all-reduce
   (2 (N - 1) / N x bytes / bandwidth), for BERT-mini at the measured
   loopback bandwidth and for BERT-base (its gradient bytes; compute per
   example scaled from BERT-mini by parameters in the encoder blocks) at
   10, 25 and 100 Gbit/s.
4. Input pipeline memory: peak resident memory of a process that counts
   the examples of a corpus (one full pass) and reads batches from
   `kbert.pretraining_dataset`, for the corpus copied 1x, 4x and 16x.
   Streaming keeps it flat.

Prints a table and writes JSON (default `benchmarks/results/scaling.json`).

    .venv/bin/python benchmarks/scaling.py            # the full size (about 5 minutes on 2 cores)
    .venv/bin/python benchmarks/scaling.py --quick    # two or three minutes
"""

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

CORPUS = ["wikitext-2-raw/wiki.valid.raw", "wikitext-2-raw/wiki.test.raw"]
BITS_PER_SECOND = (10e9, 25e9, 100e9)


def corpus_files(folder, copies, lines=None):
    """The corpus (each file's first `lines` lines) written `copies` times into `folder`."""
    from kbert.data.paths import data_dir

    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in CORPUS:
        text = (Path(data_dir()) / name).read_text(encoding="utf-8").splitlines(keepends=True)
        text = "".join(text[:lines] if lines else text)
        for copy in range(copies):
            path = Path(folder) / f"{copy:03d}-{Path(name).name}.txt"
            path.write_text(text, encoding="utf-8")
            paths.append(str(path))
    return paths


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# === One worker (a process of its own) ===


def worker(args):
    """Trains `args.steps` steps and writes its timings to `args.out` (JSON)."""
    import keras
    import numpy as np
    import tensorflow as tf

    import kbert
    from kbert.backend.distribute import is_chief, make_strategy

    strategy = make_strategy(None, connect_timeout=120)
    workers = max(strategy.num_replicas_in_sync, 1)
    vocabulary = Path(args.vocabulary).read_text().splitlines()
    data = kbert.pretraining_dataset(args.corpus, vocabulary=vocabulary, sequence_length=args.sequence_length,
                                     batch_size=args.batch_size * workers, seed=0, verbose=False)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        encoder = kbert.Encoder.from_preset("mini", vocabulary_size=len(vocabulary),
                                            max_sequence_length=args.sequence_length)
        pretrainer = kbert.Pretrainer(encoder)

    class StepTimes(keras.callbacks.Callback):
        times = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    pretrainer.fit(data, epochs=1, steps_per_epoch=args.warmup + args.steps, callbacks=[StepTimes()],
                   verbose=0)
    times = np.diff(StepTimes.times[args.warmup - 1:])
    variables = pretrainer.trainable_variables
    gradient_bytes = int(sum(np.prod(v.shape) * 4 for v in variables))

    # The all-reduce of one step's gradients, alone: zeros of every variable's shape.
    all_reduce_seconds = None
    if workers > 1:
        zeros = [tf.zeros(v.shape) for v in variables]

        @tf.function
        def all_reduce():
            def replica():
                context = tf.distribute.get_replica_context()
                return context.all_reduce("SUM", zeros)

            return strategy.run(replica)

        all_reduce()  # traced and warmed up
        runs = []
        for _ in range(args.all_reduce_runs):
            start = time.perf_counter()
            result = all_reduce()
            float(strategy.experimental_local_results(result[0])[0][0, 0])  # waits for it
            runs.append(time.perf_counter() - start)
        all_reduce_seconds = float(np.median(runs))
    if is_chief(strategy):
        Path(args.out).write_text(json.dumps({
            "workers": workers,
            "global_batch": args.batch_size * workers,
            "step_seconds": float(np.median(times)),
            "examples_per_second": args.batch_size * workers / float(np.median(times)),
            "all_reduce_seconds": all_reduce_seconds,
            "gradient_bytes": gradient_bytes,
            "parameters": int(sum(np.prod(v.shape) for v in variables)),
        }))


def pipeline_memory(args):
    """Counts the corpus' examples, reads `args.steps` batches; writes the peak memory (JSON)."""
    import kbert

    vocabulary = Path(args.vocabulary).read_text().splitlines()
    start = time.perf_counter()
    data = kbert.pretraining_dataset(args.corpus, vocabulary=vocabulary, sequence_length=args.sequence_length,
                                     batch_size=args.batch_size, seed=0, verbose=False)
    for _ in data.take(args.steps):
        pass
    Path(args.out).write_text(json.dumps({
        "examples": data.kbert_num_examples,
        "seconds": time.perf_counter() - start,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


# === The driver ===


def run_children(role, count, args, out_dir, corpus, extra=()):
    """`count` processes of `role` (a cluster of them when `count` > 1), core i for process i."""
    ports = free_ports(count)
    processes = []
    for index in range(count):
        env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
               "OMP_NUM_THREADS": "1"}
        env.pop("TF_CONFIG", None)
        if count > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                           "task": {"type": "worker", "index": index}})
        command = ["taskset", "-c", str(index % os.cpu_count()), sys.executable, __file__, "--role", role,
                   "--out", str(out_dir / f"{role}-{count}.json"), "--vocabulary", str(out_dir / "vocab.txt"),
                   "--steps", str(args.steps), "--warmup", str(args.warmup),
                   "--batch-size", str(args.batch_size), "--sequence-length", str(args.sequence_length),
                   "--all-reduce-runs", str(args.all_reduce_runs), *extra, "--corpus", *corpus]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                          stderr=open(out_dir / f"{role}-{count}-{index}.log", "w"),
                                          start_new_session=True))
    try:
        for process in processes:
            if process.wait(timeout=args.timeout) != 0:
                raise RuntimeError(f"A {role} process failed; see {out_dir}/{role}-{count}-*.log")
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
    return json.loads((out_dir / f"{role}-{count}.json").read_text())


def ring_seconds(gradient_bytes, machines, bits_per_second):
    return 2 * (machines - 1) / machines * gradient_bytes * 8 / bits_per_second


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", choices=("driver", "worker", "pipeline"), default="driver")
    parser.add_argument("--quick", action="store_true", help="a small corpus and few steps")
    parser.add_argument("--steps", type=int, default=60, help="timed steps (batches read, for memory)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="examples per worker per step")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--all-reduce-runs", type=int, default=20)
    parser.add_argument("--lines", type=int, default=None, help="first lines of each corpus file")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--corpus", nargs="*")
    parser.add_argument("--vocabulary")
    parser.add_argument("--out", default="benchmarks/results/scaling.json")
    args = parser.parse_args()
    if args.role == "worker":
        return worker(args)
    if args.role == "pipeline":
        return pipeline_memory(args)
    if args.quick:
        args.steps, args.warmup, args.batch_size, args.sequence_length = 8, 3, 8, 64
        args.all_reduce_runs, args.lines = 5, args.lines or 1500

    import kbert

    folder = Path(tempfile.mkdtemp(prefix="kbert-scaling-"))
    try:
        base = corpus_files(folder / "x1", 1, args.lines)
        vocabulary = kbert.learn_vocabulary(base, vocabulary_size=4096, verbose=False)
        (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
        runs = {count: run_children("worker", count, args, folder, base) for count in (1, 2)}
        memory = {}
        for copies in (1, 4, 16):
            corpus = base if copies == 1 else corpus_files(folder / f"x{copies}", copies, args.lines)
            memory[copies] = run_children("pipeline", 1, args, folder, corpus)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    one, two = runs[1], runs[2]
    share = two["all_reduce_seconds"] / two["step_seconds"]
    loopback_bits = two["gradient_bytes"] * 8 / two["all_reduce_seconds"] * 1  # 2 machines: 2*(1/2)=1
    from kbert.models.presets import parameter_count

    # Compute per example scales with the parameters besides the token embedding (a lookup).
    blocks = {name: parameter_count(name, 0) for name in ("mini", "base")}
    base_bytes = parameter_count("base", 30522) * 4
    base_compute = (one["step_seconds"] / one["global_batch"]) * blocks["base"] / blocks["mini"] * 32
    model = []
    for machines in (1, 2, 4, 8, 16, 64):
        row = {"machines": machines}
        mini_compute = one["step_seconds"]
        mini_comm = ring_seconds(two["gradient_bytes"], machines, loopback_bits)
        row["mini_efficiency_loopback"] = mini_compute / (mini_compute + mini_comm)
        for bits in BITS_PER_SECOND:
            comm = ring_seconds(base_bytes, machines, bits)
            row[f"base_efficiency_{bits / 1e9:g}gbit"] = base_compute / (base_compute + comm)
        model.append(row)

    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "quick": args.quick,
        "settings": {"steps": args.steps, "warmup": args.warmup, "batch_per_worker": args.batch_size,
                     "sequence_length": args.sequence_length, "corpus_lines_per_file": args.lines},
        "one_worker": one, "two_workers": two,
        "speedup": two["examples_per_second"] / one["examples_per_second"],
        "communication_share": share, "loopback_gbit_per_second": loopback_bits / 1e9,
        "bert_base": {"gradient_bytes": base_bytes, "compute_seconds_per_step_of_32": base_compute},
        "model": model,
        "pipeline_memory": {f"{copies}x": value for copies, value in memory.items()},
    }
    print(f"BERT-mini pretraining, {args.sequence_length} tokens, {args.batch_size} examples per worker "
          "per step, one core per worker")
    print(f"{'workers':>8} {'examples/s':>11} {'step s':>8} {'all-reduce s':>13} {'share':>6}")
    for run in (one, two):
        reduce = run["all_reduce_seconds"]
        seconds = "-" if reduce is None else f"{reduce:.4f}"
        part = "-" if reduce is None else f"{reduce / run['step_seconds']:.1%}"
        print(f"{run['workers']:>8} {run['examples_per_second']:>11.1f} {run['step_seconds']:>8.3f} "
              f"{seconds:>13} {part:>6}")
    print(f"speed-up {result['speedup']:.2f}x; {two['gradient_bytes'] / 1e6:.1f} MB of gradients per step; "
          f"loopback all-reduce {loopback_bits / 1e9:.2f} Gbit/s")
    print("\nModelled scaling efficiency (compute / (compute + ring all-reduce)):")
    header = ["machines", "mini@loopback"] + [f"base@{b / 1e9:g}Gbit" for b in BITS_PER_SECOND]
    print(" ".join(f"{h:>14}" for h in header))
    for row in model:
        values = [row["mini_efficiency_loopback"]] + [row[f"base_efficiency_{b / 1e9:g}gbit"]
                                                      for b in BITS_PER_SECOND]
        print(f"{row['machines']:>14} " + " ".join(f"{v:>14.1%}" for v in values))
    print("\nInput pipeline (count pass + batches read):")
    print(f"{'corpus':>7} {'examples':>9} {'peak MB':>8} {'seconds':>8}")
    for copies, value in memory.items():
        print(f"{copies:>6}x {value['examples']:>9,} {value['peak_rss_mb']:>8.0f} {value['seconds']:>8.1f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nWrote {out}")


if __name__ == "__main__":
    main()
