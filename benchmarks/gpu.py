"""BERT-base training and inference speed on a GPU: kbert on JAX and PyTorch beside keras-hub and transformers.

One run measures every path on the same machine, each path in a fresh
process (JAX and PyTorch never share the GPU), its workloads one after the
other:

- `kbert-jax`, `kbert-torch`: a `kbert.Classifier` (two classes) on
  `kbert.Encoder.from_preset("base")`, `dtype="mixed_bfloat16"`, compiled
  with kbert's defaults (AdamW, warm-up and decay, accuracy), fed token ids;
- `kbert-jax-attention-dropout-0`: the same with `attention_dropout=0`, so
  that training attends through cuDNN's fused kernel (training workloads
  only: inference is `kbert-jax`'s);
- `kbert-jax-gelu-approximate`: `kbert-jax` with GELU's tanh approximation
  (keras-hub's BERT computes that one; kbert BERT's exact GELU);
- `kbert-torch-compile`: the same with `compile(jit_compile=True)`, which
  on PyTorch runs each Transformer block as one `torch.compile`d program
  and the rest of the step eagerly;
- `keras-hub-jax`, `keras-hub-torch`: keras-hub's `BertBackbone` of the
  same shape with dropout and a Dense head (`keras_paths`: what its
  `BertTextClassifier` computes, without the preprocessing that needs
  TensorFlow), `mixed_bfloat16`, AdamW;
- `transformers`, `transformers-compile`: `BertForSequenceClassification`
  with bfloat16 autocast and `torch.optim.AdamW`, eager and under
  `torch.compile`.

Workloads (random weights, dropout as BERT trains, every token real):

- `train_32x128`: training steps, batches of 32 sequences of 128 tokens;
- `train_16x512`: training steps, 16 x 512;
- `infer_256x128`: inference (the classifier's forward pass), 256 x 128.

The Keras paths run `fit` and `predict` as users do (the whole step
compiled on JAX). Each workload is timed two ways, after a warm-up that
compiles:

- `whole call`: one `fit` (or `predict`) of the timed steps, nothing read
  until it ends, so that JAX dispatches ahead of the device;
- `per step`: the loss read after every step, as Keras' progress bar and
  any per-batch callback do (inference: `predict_on_batch`, its answer
  read each batch); the host's work between steps then adds to each step.

Each figure is sequences per second, with the TFLOP/s it implies (the
model's matmuls: 2 flops per weight per token and attention's two batched
products, 3x that for a training step). On the Keras paths, one more
per-step `fit` runs under `cProfile`: the row keeps the host's busiest
functions per step (`host_profile`), where a gap between the two timings
comes from. Each path has a time limit (`--path-seconds`, by default 9
minutes shared by the paths), and results go to the JSON file row by row,
so a run cut short still reports what it measured. Needs no TensorFlow.

    python benchmarks/gpu.py                 # BERT-base on the GPU
    python benchmarks/gpu.py --tiny          # a tiny BERT on the CPU: the smoke test
    python benchmarks/gpu.py --paths kbert-jax transformers-compile --workloads train_16x512
    python benchmarks/gpu.py --paths kbert-jax transformers-compile --path-seconds 90 transformers-compile=150
"""

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Python puts this script's folder first on the path, where a benchmark's name
# could hide a module that a library imports (tests/benchmarks checks the names).
# The folder goes last instead: `keras_paths` and `timing` are found there.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]
sys.path.append(str(Path(__file__).resolve().parent))

from timing import cpu_model, write_json  # noqa: E402
PATHS = ("kbert-jax", "kbert-jax-attention-dropout-0", "kbert-jax-gelu-approximate", "kbert-torch",
         "kbert-torch-compile", "keras-hub-jax", "keras-hub-torch", "transformers", "transformers-compile")
WORKLOADS = {  # name: (training?, batch size, sequence length)
    "train_32x128": (True, 32, 128),
    "train_16x512": (True, 16, 512),
    "infer_256x128": (False, 256, 128),
}
BASE = {"vocabulary_size": 30522, "num_layers": 12, "hidden_dim": 768, "num_heads": 12, "intermediate_dim": 3072}
# --tiny: a BERT of two narrow layers and batches a CPU runs in seconds.
TINY = {"vocabulary_size": 1000, "num_layers": 2, "hidden_dim": 64, "num_heads": 2, "intermediate_dim": 256}
TINY_SHAPES = {"train_32x128": (4, 32), "train_16x512": (2, 128), "infer_256x128": (8, 32)}
STEPS = {"warmup": 3, "timed": 20}
# Paths that differ from another only in training: their inference is that path's.
TRAINING_ONLY = ("kbert-jax-attention-dropout-0",)
# The host's busiest functions kept per profiled workload.
PROFILE_TOP = 12
# The whole run, shared by the paths: it fits in one 10-minute call of a GPU machine.
TOTAL_SECONDS = 540
TINY_STEPS = {"warmup": 2, "timed": 3}
LEARNING_RATE = 5e-5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny BERT and small batches (CPU smoke test)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--timed-steps", type=int, help="timed steps per workload (default 20; 3 with --tiny)")
    parser.add_argument("--path-seconds", nargs="+", default=[], metavar="[PATH=]SECONDS",
                        help=f"time limit of each path's process, or of one path (default {TOTAL_SECONDS} s "
                             "shared by the paths)")
    parser.add_argument("--out", type=Path, help="JSON results (default benchmarks/results/gpu.json, "
                                                 "gpu-tiny.json with --tiny)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    steps = dict(TINY_STEPS if args.tiny else STEPS)
    if args.timed_steps:
        steps["timed"] = args.timed_steps
    out = args.out or ROOT / "benchmarks" / "results" / ("gpu-tiny.json" if args.tiny else "gpu.json")
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.node(),
        "model": TINY if args.tiny else BASE,
        "precision": "bfloat16 mixed precision",
        "steps": steps,
        "rows": [],
    }
    limits = path_limits(args.path_seconds, args.paths, parser)
    for path in args.paths:
        workloads = [w for w in args.workloads if WORKLOADS[w][0] or path not in TRAINING_ONLY]
        if not workloads:
            continue
        job = {"path": path, "tiny": args.tiny, "workloads": workloads, "steps": steps}
        for row in run_worker(job, limits[path]):
            report["rows"].append(row)
            report.setdefault("device", row.get("device"))
            write_json(out, report)
            print(format_row(row), flush=True)
    print()
    print(table(report))
    print(f"\nwritten to {out}")
    failed = [row for row in report["rows"] if "error" in row]
    return 1 if failed and len(failed) == len(report["rows"]) else 0


def path_limits(items, paths, parser):
    """Each path's time limit from `--path-seconds`: `SECONDS` for every path, `PATH=SECONDS` for one."""
    limits = dict.fromkeys(paths, TOTAL_SECONDS / len(paths))
    for item in items:
        path, _, seconds = item.rpartition("=")
        try:
            seconds = float(seconds)
        except ValueError:
            parser.error(f"--path-seconds: {item!r} is not SECONDS or PATH=SECONDS")
        if path and path not in PATHS:
            parser.error(f"--path-seconds: no path {path!r} (choose from {', '.join(PATHS)})")
        for name in [path] if path else paths:
            limits[name] = seconds
    return limits


def run_worker(job, limit):
    """Runs one path's workloads in a fresh process, killed after `limit` seconds; yields a row per workload as it finishes."""
    environment = dict(os.environ)
    backend = "jax" if "-jax" in job["path"] else "torch"
    environment.update(KERAS_BACKEND=backend, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--worker", json.dumps(job)]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    timer = threading.Timer(limit, process.kill)
    timer.start()
    done = set()
    try:
        for line in process.stdout:
            if line.startswith("RESULT "):
                row = json.loads(line[len("RESULT "):])
                done.add(row["workload"])
                yield row
        process.wait()
    finally:
        timed_out = not timer.is_alive() and process.returncode != 0
        timer.cancel()
    error = process.stderr.read().strip().splitlines()
    for workload in job["workloads"]:
        if workload not in done:
            last = f"time limit of {limit:.0f} s reached" if timed_out else (
                error[-1] if error else f"exit code {process.returncode}")
            yield {"path": job["path"], "workload": workload, "error": last}


def worker(job):
    """In the path's process: each workload measured, a `RESULT {json}` line each."""
    runner = {"kbert": KerasRunner, "keras-hub": KerasRunner, "transformers": TransformersRunner}
    library = next(name for name in runner if job["path"].startswith(name))
    shape = TINY if job["tiny"] else BASE
    for workload in job["workloads"]:
        training, batch_size, length = WORKLOADS[workload]
        if job["tiny"]:
            batch_size, length = TINY_SHAPES[workload]
        row = {"path": job["path"], "workload": workload, "batch_size": batch_size, "sequence_length": length}
        try:
            measure = runner[library](job["path"], shape, training, length)
            seconds = measure(batch_size, job["steps"])
            sequences = batch_size * job["steps"]["timed"]
            flops = sequence_flops(shape, length, training)
            row.update(
                sequences_per_second=sequences / seconds["whole call"],
                sequences_per_second_per_step=sequences / seconds["per step"],
                tflops=flops * sequences / seconds["whole call"] / 1e12,
                tflops_per_step=flops * sequences / seconds["per step"] / 1e12,
                seconds=seconds, device=measure.device, versions=measure.versions,
            )
            if getattr(measure, "host_profile", None):
                row["host_profile"] = measure.host_profile
        except Exception as error:  # noqa: BLE001 (a failed row is reported, not fatal)
            row["error"] = f"{type(error).__name__}: {error}"[:500]
        print("RESULT " + json.dumps(row), flush=True)
        measure = None
    return 0


def sequence_flops(shape, length, training):
    """Floating-point operations per sequence: the encoder's matmuls (embeddings and head left out).

    2 per weight per token for the projections and feed-forward layers, and
    attention's two batched products (2 x length x hidden per token each);
    training is three passes' worth (forward, and the gradients of inputs
    and of weights).
    """
    hidden, layers = shape["hidden_dim"], shape["num_layers"]
    per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * shape["intermediate_dim"]) \
        + layers * 4 * length * hidden
    return per_token * length * (3 if training else 1)


def token_ids(rng, count, length, vocabulary_size):
    return {
        "token_ids": rng.integers(5, vocabulary_size, (count, length)).astype("int32"),
        "segment_ids": (np.arange(length) >= length // 2).astype("int32")[None].repeat(count, 0),
        "padding_mask": np.ones((count, length), "int32"),
    }


class KerasRunner:
    """kbert's classifier or keras-hub's on Keras' JAX or PyTorch backend, timed through `fit` / `predict`."""

    def __init__(self, path, shape, training, length):
        import keras

        self.training = training
        self.length = length
        self.model = self._build(path, shape, length)
        self.vocabulary_size = shape["vocabulary_size"]
        self.device = _device()
        self.versions = {"keras": keras.__version__, "backend": keras.config.backend(), **_backend_version()}

    @staticmethod
    def _build(path, shape, length):
        if path.startswith("kbert"):
            import kbert

            version = {"kbert": kbert.__version__}
            # Attention dropout 0: training attends through the fused kernel (cuDNN's).
            attention_dropout = 0.0 if path.endswith("attention-dropout-0") else None
            activation = "gelu_approximate" if path.endswith("gelu-approximate") else "gelu"
            encoder = kbert.Encoder(**shape, max_sequence_length=max(512, length), dtype="mixed_bfloat16",
                                    attention_dropout=attention_dropout, activation=activation)
            model = kbert.Classifier(encoder, num_classes=2)
            model.compile(learning_rate=LEARNING_RATE, jit_compile=path.endswith("-compile") or "auto")
        else:
            import keras_hub
            from keras_paths import keras_hub_classifier

            version = {"keras_hub": keras_hub.__version__}
            model = keras_hub_classifier(shape, max(512, length), dtype="mixed_bfloat16",
                                         learning_rate=LEARNING_RATE)
        model.library_version = version
        return model

    def __call__(self, batch_size, steps):
        rng = np.random.default_rng(0)

        def data(count):
            x = token_ids(rng, count * batch_size, self.length, self.vocabulary_size)
            return x, rng.integers(0, 2, count * batch_size)

        from keras_paths import reads_the_loss

        x, y = data(steps["warmup"])
        timed_x, timed_y = data(steps["timed"])
        seconds = {}
        if self.training:
            self.model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
            for mode, callbacks in (("whole call", []), ("per step", [reads_the_loss()])):
                start = time.perf_counter()
                self.model.fit(timed_x, timed_y, batch_size=batch_size, epochs=1, verbose=0,
                               callbacks=callbacks)
                seconds[mode] = time.perf_counter() - start
            self.host_profile = host_profile(
                lambda: self.model.fit(timed_x, timed_y, batch_size=batch_size, epochs=1, verbose=0,
                                       callbacks=[reads_the_loss()]), steps["timed"])
        else:
            self.model.predict(x, batch_size=batch_size, verbose=0)
            self.model.predict_on_batch({name: value[:batch_size] for name, value in x.items()})
            start = time.perf_counter()
            self.model.predict(timed_x, batch_size=batch_size, verbose=0)
            seconds["whole call"] = time.perf_counter() - start
            start = time.perf_counter()
            for first in range(0, len(timed_y), batch_size):
                np.asarray(self.model.predict_on_batch(
                    {name: value[first:first + batch_size] for name, value in timed_x.items()}))
            seconds["per step"] = time.perf_counter() - start
        self.versions.update(self.model.library_version)
        return seconds


def host_profile(run, steps):
    """`run()` under `cProfile`: the functions with the most time of their own, in ms per step."""
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.runcall(run)
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile, stream=io.StringIO())
    busiest = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:PROFILE_TOP]
    return {
        "wall_ms_per_step": 1000 * wall / steps,
        "functions": [{"function": f"{Path(file).name}:{line}({name})", "calls_per_step": calls / steps,
                       "own_ms_per_step": 1000 * own / steps, "cumulative_ms_per_step": 1000 * cumulative / steps}
                      for (file, line, name), (_, calls, own, cumulative, _) in busiest],
    }


class TransformersRunner:
    """transformers' `BertForSequenceClassification` in bfloat16 autocast, eager or under `torch.compile`."""

    def __init__(self, path, shape, training, length):
        import torch
        import transformers

        self.torch = torch
        self.device = _device()
        self.place = "cuda" if torch.cuda.is_available() else "cpu"
        config = transformers.BertConfig(
            vocab_size=shape["vocabulary_size"], hidden_size=shape["hidden_dim"],
            num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
            intermediate_size=shape["intermediate_dim"], max_position_embeddings=max(512, length),
            num_labels=2,
        )
        model = transformers.BertForSequenceClassification(config).to(self.place)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
        self.model = torch.compile(model) if path.endswith("-compile") else model
        self.training = training
        self.length = length
        self.vocabulary_size = shape["vocabulary_size"]
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__}

    def _batches(self, batch_size, length, count):
        torch = self.torch
        rng = np.random.default_rng(0)
        for _ in range(count):
            x = token_ids(rng, batch_size, length, self.vocabulary_size)
            yield {
                "input_ids": torch.tensor(x["token_ids"], dtype=torch.long, device=self.place),
                "token_type_ids": torch.tensor(x["segment_ids"], dtype=torch.long, device=self.place),
                "attention_mask": torch.tensor(x["padding_mask"], dtype=torch.long, device=self.place),
                "labels": torch.tensor(rng.integers(0, 2, batch_size), dtype=torch.long, device=self.place),
            }

    def _step(self, batch):
        torch = self.torch
        with torch.autocast(self.place, dtype=torch.bfloat16):
            if not self.training:
                with torch.no_grad():
                    return self.model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def __call__(self, batch_size, steps):
        self.model.train(self.training)
        for batch in self._batches(batch_size, self.length, steps["warmup"]):
            self._step(batch)
        batches = list(self._batches(batch_size, self.length, steps["timed"]))
        seconds = {}
        for mode in ("whole call", "per step"):
            self._synchronize()
            start = time.perf_counter()
            for batch in batches:
                result = self._step(batch)
                if mode == "per step":
                    result.float().sum().item()
            self._synchronize()
            seconds[mode] = time.perf_counter() - start
        return seconds

    def _synchronize(self):
        if self.place == "cuda":
            self.torch.cuda.synchronize()


def _device():
    """What the path runs on: `gpu: <name>` or `cpu: <model>`."""
    import keras

    if keras.config.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            return f"{device.platform}: {device.device_kind}"
    else:
        import torch

        if torch.cuda.is_available():
            return f"gpu: {torch.cuda.get_device_name(0)}"
    return f"cpu: {cpu_model()}"


def _backend_version():
    import keras

    if keras.config.backend() == "jax":
        import jax

        return {"jax": jax.__version__}
    import torch

    return {"torch": torch.__version__}


def format_row(row):
    if "error" in row:
        return f"{row['path']:<22} {row['workload']:<14} failed: {row['error']}"
    return (f"{row['path']:<22} {row['workload']:<14} {row['sequences_per_second']:>10,.1f} seq/s whole call "
            f"({row['tflops']:.3g} TFLOP/s), {row['sequences_per_second_per_step']:>10,.1f} per step "
            f"({row['tflops_per_step']:.3g} TFLOP/s)")


def table(report):
    """Sequences per second and TFLOP/s, a column per workload, a row per path and timing, against transformers + torch.compile."""
    workloads = [w for w in WORKLOADS if any(row["workload"] == w for row in report["rows"])]
    rows = {(row["path"], row["workload"]): row for row in report["rows"] if "error" not in row}
    timings = {"whole call": ("sequences_per_second", "tflops"),
               "per step": ("sequences_per_second_per_step", "tflops_per_step")}
    lines = [f"device: {report.get('device')}; {report['precision']}; model {report['model']}",
             f"| path | timing | {' | '.join(workloads)} |", "|---" * (len(workloads) + 2) + "|"]
    for path in dict.fromkeys(row["path"] for row in report["rows"]):
        for timing, (rate, tflops) in timings.items():
            cells = []
            for workload in workloads:
                row, reference = rows.get((path, workload)), rows.get(("transformers-compile", workload))
                if row is None:
                    measured = any(r["path"] == path and r["workload"] == workload for r in report["rows"])
                    cells.append("failed" if measured else "-")
                    continue
                ratio = f", {row[rate] / reference[rate]:.2f}x" if reference else ""
                cells.append(f"{row[rate]:,.1f} ({row[tflops]:.3g} TFLOP/s{ratio})")
            lines.append(f"| {path} | {timing} | {' | '.join(cells)} |")
    lines.append("(x: against transformers + torch.compile, timed the same way)")
    return "\n".join(lines)


import numpy as np  # noqa: E402  (after the parser: `--help` stays instant)

if __name__ == "__main__":
    sys.exit(main())
