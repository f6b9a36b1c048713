"""Host work per training step: kbert's classifier beside keras-hub's, read each step and unread, on each Keras backend.

A GPU waits for whatever the host does between two steps unless the host
runs ahead: on JAX, `fit` dispatches a step and goes on, until something
reads a result (Keras' progress bar and any per-batch callback read the
loss at every step). Then each step costs its device time plus the host's
work. This benchmark measures that host work on the CPU, with a BERT of
BERT-base's depth and variables (12 layers, 201 trainable arrays) but
little to compute, so that the host's share shows:

- `kbert`: `kbert.Classifier` on `kbert.Encoder`, compiled with kbert's
  defaults (AdamW with warm-up and decay, gradients clipped, accuracy);
- `keras-hub`: keras-hub's `BertBackbone` with dropout and a Dense head,
  AdamW (`keras_paths.keras_hub_classifier`).

Both take the same token-id batches, each in `fit` as its users call it.
Modes, each a `fit` call of `--steps` steps, timed whole:

- `unread`: no per-batch callback (JAX dispatches ahead);
- `read each step`: a callback reads the loss after every step, as the
  progress bar does;
- `+ LearningRateLogger`: that, plus kbert's per-batch callback
  (`kbert.callbacks.LearningRateLogger`) on either model.

Rounds alternate the paths and modes; the table gives medians in ms per
step, and Python function calls per step (the difference between a long
and a short `fit`, under `cProfile`: a count, which a busy host does not
change). On JAX it also compares the compiled training steps: XLA
instructions, fusions, and operations that move data to the host.

    python benchmarks/host_work.py                          # jax, tensorflow, torch
    python benchmarks/host_work.py --backends jax --rounds 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Python puts this script's folder first on the path, where a benchmark's name
# could hide a module that a library imports (tests/benchmarks checks the names).
# The folder goes last instead: the shared modules (`timing`, `keras_paths`) are found there.
SCRIPTS = str(Path(__file__).resolve().parent)
if sys.path and Path(sys.path[0]).resolve() == Path(SCRIPTS):
    del sys.path[0]
sys.path.append(SCRIPTS)

from timing import cpu_model, write_json  # noqa: E402

BACKENDS = ("jax", "tensorflow", "torch")
PATHS = ("kbert", "keras-hub")
MODES = ("unread", "read each step", "+ LearningRateLogger")
SHAPE = {"vocabulary_size": 1000, "num_layers": 12, "hidden_dim": 64, "num_heads": 2, "intermediate_dim": 128}
BATCH_SIZE, SEQUENCE_LENGTH = 8, 32
# XLA operations that move data between the device and the host inside a program.
HOST_TRANSFER_OPS = ("outfeed", "infeed", "send", "recv", "send-done", "recv-done", "host-compute")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of every path and mode")
    parser.add_argument("--steps", type=int, default=30, help="steps per timed `fit` call")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "host_work.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    report = {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "model": SHAPE,
        "batch": [BATCH_SIZE, SEQUENCE_LENGTH],
        "rounds": args.rounds,
        "steps": args.steps,
        "backends": {},
    }
    for backend in args.backends:
        report["backends"][backend] = run_worker(backend, args.rounds, args.steps)
        write_json(args.out, report)
    print(table(report))
    print(f"\nwritten to {args.out}")
    return 0


def run_worker(backend, rounds, steps):
    """One backend's measurements, in a fresh process with that backend."""
    environment = dict(os.environ, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    job = json.dumps({"rounds": rounds, "steps": steps})
    result = subprocess.run([sys.executable, __file__, "--worker", job], env=environment,
                            capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode or not lines:
        return {"error": (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]}
    return json.loads(lines[-1][len("RESULT "):])


def worker(job):
    import keras

    import kbert

    result = {"versions": {"keras": keras.__version__, "kbert": kbert.__version__}}
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf
        from timing import matmul_gflops

        result["matmul_peak_gflops"] = max(matmul_gflops(tf, 1024, 768, tf.float32).values())
    models = {"kbert": kbert_classifier(), "keras-hub": keras_hub_model()}
    data = batches(job["steps"])
    for model in models.values():
        model.fit(*batches(2), batch_size=BATCH_SIZE, verbose=0)  # compiles the step
    times = {(path, mode): [] for path in models for mode in MODES}
    for _ in range(job["rounds"]):
        for path, model in models.items():
            for mode in MODES:
                start = time.perf_counter()
                model.fit(*data, batch_size=BATCH_SIZE, verbose=0, shuffle=False, callbacks=callbacks(mode))
                times[path, mode].append(1000 * (time.perf_counter() - start) / job["steps"])
    result["ms_per_step"] = {path: {mode: statistics.median(times[path, mode]) for mode in MODES}
                             for path in models}
    result["ms_per_step_rounds"] = {path: {mode: times[path, mode] for mode in MODES} for path in models}
    result["python_calls_per_step"] = {path: python_calls_per_step(model) for path, model in models.items()}
    if keras.config.backend() == "jax":
        result["compiled_step"] = {path: compiled_step(model) for path, model in models.items()}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def kbert_classifier():
    import kbert

    encoder = kbert.Encoder(**SHAPE, max_sequence_length=64)
    model = kbert.Classifier(encoder, num_classes=2)
    model.compile(learning_rate=1e-4)
    return model


def keras_hub_model():
    from keras_paths import keras_hub_classifier

    return keras_hub_classifier(SHAPE, max_sequence_length=64, learning_rate=1e-4)


def batches(steps):
    import numpy as np

    rng = np.random.default_rng(0)
    count = steps * BATCH_SIZE
    x = {
        "token_ids": rng.integers(5, SHAPE["vocabulary_size"], (count, SEQUENCE_LENGTH)).astype("int32"),
        "segment_ids": np.zeros((count, SEQUENCE_LENGTH), "int32"),
        "padding_mask": np.ones((count, SEQUENCE_LENGTH), "int32"),
    }
    return x, rng.integers(0, 2, count)


def callbacks(mode):
    import kbert
    from keras_paths import reads_the_loss

    if mode == "unread":
        return []
    if mode == "read each step":
        return [reads_the_loss()]
    return [kbert.callbacks.LearningRateLogger(), reads_the_loss()]


def python_calls_per_step(model, short=5, long=25):
    """Python function calls per step of `fit`, loss read each step: calls of a long fit less a short one's."""
    import cProfile
    import pstats

    counts = []
    for steps in (short, long):
        data = batches(steps)
        profile = cProfile.Profile()
        profile.enable()
        model.fit(*data, batch_size=BATCH_SIZE, verbose=0, shuffle=False, callbacks=callbacks("read each step"))
        profile.disable()
        counts.append(pstats.Stats(profile).total_calls)
    return round((counts[1] - counts[0]) / (long - short))


def compiled_step(model):
    """The XLA program of the model's training step (JAX): instructions, fusions, matmuls and host transfers."""
    import re
    from collections import Counter

    import jax

    x, y = batches(1)
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                 optimizer_variables=True, metrics_variables=True)
    text = jax.jit(model.train_step, donate_argnums=0).lower(state, (x, y)).compile().as_text()
    ops = Counter(re.findall(r"= \S+ ([a-z][\w-]*)\(", text))
    entry = text[text.index("\nENTRY"):]
    return {
        "instructions": sum(ops.values()),
        "fusions": Counter(re.findall(r"= \S+ ([a-z][\w-]*)\(", entry))["fusion"],
        "dots": ops["dot"],
        "host_transfers": sum(ops[name] for name in HOST_TRANSFER_OPS),
        "host_callbacks": len(re.findall(r"custom_call_target=\"[^\"]*callback", text)),
        "state_arrays": len(jax.tree_util.tree_leaves(state)),
    }


def table(report):
    """ms per step (medians), kbert against keras-hub, and Python calls per step, a row per backend and mode."""
    peak = next((r["matmul_peak_gflops"] for r in report["backends"].values() if "matmul_peak_gflops" in r), None)
    lines = [f"CPU: {report['cpu']}, {report['cores']} cores"
             + (f"; TensorFlow float32 matmul peak {peak:.0f} GFLOP/s" if peak else "")
             + f"; BERT {report['model']['num_layers']} x H{report['model']['hidden_dim']}, "
             + f"batch {BATCH_SIZE} x {SEQUENCE_LENGTH}, medians of {report['rounds']} rounds of "
             + f"{report['steps']} steps",
             "| backend | mode | kbert ms/step | keras-hub ms/step | kbert / keras-hub |",
             "|---|---|---:|---:|---:|"]
    for backend, result in report["backends"].items():
        if "error" in result:
            lines.append(f"| {backend} | failed: {result['error']} | | | |")
            continue
        for mode in MODES:
            ours, theirs = (result["ms_per_step"][path][mode] for path in PATHS)
            lines.append(f"| {backend} | {mode} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |")
    lines += ["", "| backend | kbert Python calls/step | keras-hub Python calls/step |", "|---|---:|---:|"]
    for backend, result in report["backends"].items():
        if "error" not in result:
            calls = result["python_calls_per_step"]
            lines.append(f"| {backend} | {calls['kbert']:,} | {calls['keras-hub']:,} |")
    compiled = report["backends"].get("jax", {}).get("compiled_step")
    if compiled:
        names = list(compiled["kbert"])
        lines += ["", "JAX's compiled training step:", "| path | " + " | ".join(names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        for path in PATHS:
            lines.append(f"| {path} | " + " | ".join(f"{compiled[path][name]:,}" for name in names) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
