"""BERT-base training and inference speed on a GPU: kbert on JAX and PyTorch beside keras-hub and transformers.

One run measures every path on the same machine, each path in a fresh
process (JAX and PyTorch never share the GPU), its workloads one after the
other:

- `kbert-jax`, `kbert-torch`: a `kbert.Classifier` (two classes) on
  `kbert.Encoder.from_preset("base")`, `dtype="mixed_bfloat16"`, compiled
  with kbert's defaults (AdamW, warm-up and decay, accuracy), fed token ids;
- `kbert-torch-compile`: the same with `compile(jit_compile=True)`, which
  has Keras' PyTorch trainer put each step through `torch.compile`;
- `keras-hub-jax`, `keras-hub-torch`: keras-hub's `BertTextClassifier` on a
  `BertBackbone` of the same shape, `mixed_bfloat16`, AdamW;
- `transformers`, `transformers-compile`: `BertForSequenceClassification`
  with bfloat16 autocast and `torch.optim.AdamW`, eager and under
  `torch.compile`.

Workloads (random weights, dropout as BERT trains, every token real):

- `train_32x128`: training steps, batches of 32 sequences of 128 tokens;
- `train_16x512`: training steps, 16 x 512;
- `infer_256x128`: inference (the classifier's forward pass), 256 x 128.

The Keras paths run `fit` and `predict` as users do (the whole step
compiled on JAX); each figure is sequences per second over the timed steps
after a warm-up that compiles. Results go to the JSON file row by row, so a
run cut short still reports what it measured. Needs no TensorFlow.

    python benchmarks/gpu.py                 # BERT-base on the GPU
    python benchmarks/gpu.py --tiny          # a tiny BERT on the CPU: the smoke test
    python benchmarks/gpu.py --paths kbert-jax transformers-compile --workloads train_16x512
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Python puts this script's folder first on the path, where a benchmark's name
# could hide a module that a library imports (tests/benchmarks checks the names).
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]
PATHS = ("kbert-jax", "kbert-torch", "kbert-torch-compile", "keras-hub-jax", "keras-hub-torch", "transformers", "transformers-compile")
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
TINY_STEPS = {"warmup": 2, "timed": 3}
LEARNING_RATE = 5e-5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny BERT and small batches (CPU smoke test)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--timed-steps", type=int, help="timed steps per workload (default 20; 3 with --tiny)")
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
    for path in args.paths:
        job = {"path": path, "tiny": args.tiny, "workloads": args.workloads, "steps": steps}
        for row in run_worker(job):
            report["rows"].append(row)
            report.setdefault("device", row.get("device"))
            write_json(out, report)
            print(format_row(row), flush=True)
    print()
    print(table(report))
    print(f"\nwritten to {out}")
    failed = [row for row in report["rows"] if "error" in row]
    return 1 if failed and len(failed) == len(report["rows"]) else 0


def run_worker(job):
    """Runs one path's workloads in a fresh process; yields a row per workload as it finishes."""
    environment = dict(os.environ)
    backend = "jax" if job["path"].endswith("-jax") else "torch"
    environment.update(KERAS_BACKEND=backend, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--worker", json.dumps(job)]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    done = set()
    for line in process.stdout:
        if line.startswith("RESULT "):
            row = json.loads(line[len("RESULT "):])
            done.add(row["workload"])
            yield row
    process.wait()
    error = process.stderr.read().strip().splitlines()
    for workload in job["workloads"]:
        if workload not in done:
            last = error[-1] if error else f"exit code {process.returncode}"
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
            row.update(sequences_per_second=batch_size * job["steps"]["timed"] / seconds,
                       seconds=seconds, device=measure.device, versions=measure.versions)
        except Exception as error:  # noqa: BLE001 (a failed row is reported, not fatal)
            row["error"] = f"{type(error).__name__}: {error}"[:500]
        print("RESULT " + json.dumps(row), flush=True)
        measure = None
    return 0


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
        import keras

        if path.startswith("kbert"):
            import kbert

            version = {"kbert": kbert.__version__}
            encoder = kbert.Encoder(**shape, max_sequence_length=max(512, length), dtype="mixed_bfloat16")
            model = kbert.Classifier(encoder, num_classes=2)
            model.compile(learning_rate=LEARNING_RATE, jit_compile=path.endswith("-compile") or "auto")
        else:
            import keras_hub

            version = {"keras_hub": keras_hub.__version__}
            backbone = keras_hub.models.BertBackbone(**shape, max_sequence_length=max(512, length),
                                                     dtype="mixed_bfloat16")
            model = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None)
            model.compile(
                optimizer=keras.optimizers.AdamW(LEARNING_RATE, weight_decay=0.01),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
            )
        model.library_version = version
        return model

    def __call__(self, batch_size, steps):
        rng = np.random.default_rng(0)

        def data(count):
            x = token_ids(rng, count * batch_size, self.length, self.vocabulary_size)
            return x, rng.integers(0, 2, count * batch_size)

        x, y = data(steps["warmup"])
        timed_x, timed_y = data(steps["timed"])
        if self.training:
            self.model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
            start = time.perf_counter()
            self.model.fit(timed_x, timed_y, batch_size=batch_size, epochs=1, verbose=0)
        else:
            self.model.predict(x, batch_size=batch_size, verbose=0)
            start = time.perf_counter()
            self.model.predict(timed_x, batch_size=batch_size, verbose=0)
        self.versions.update(self.model.library_version)
        return time.perf_counter() - start


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
        self._synchronize()
        start = time.perf_counter()
        for batch in batches:
            self._step(batch)
        self._synchronize()
        return time.perf_counter() - start

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
    return f"cpu: {_cpu_model()}"


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _backend_version():
    import keras

    if keras.config.backend() == "jax":
        import jax

        return {"jax": jax.__version__}
    import torch

    return {"torch": torch.__version__}


def write_json(path, report):
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.partial")
    temporary.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(temporary, path)


def format_row(row):
    if "error" in row:
        return f"{row['path']:<22} {row['workload']:<14} failed: {row['error']}"
    return f"{row['path']:<22} {row['workload']:<14} {row['sequences_per_second']:>10,.1f} seq/s"


def table(report):
    """Sequences per second, a column per workload, and each path against transformers + torch.compile."""
    workloads = [w for w in WORKLOADS if any(row["workload"] == w for row in report["rows"])]
    values = {(row["path"], row["workload"]): row.get("sequences_per_second") for row in report["rows"]}
    reference = {w: values.get(("transformers-compile", w)) for w in workloads}
    lines = [f"device: {report.get('device')}; {report['precision']}; model {report['model']}",
             f"| path | {' | '.join(workloads)} |", "|---" * (len(workloads) + 1) + "|"]
    for path in dict.fromkeys(row["path"] for row in report["rows"]):
        cells = []
        for workload in workloads:
            value = values.get((path, workload))
            if value is None:
                cells.append("failed")
                continue
            ratio = f" ({value / reference[workload]:.2f}x)" if reference[workload] else ""
            cells.append(f"{value:,.1f}{ratio}")
        lines.append(f"| {path} | {' | '.join(cells)} |")
    lines.append("(x: against transformers + torch.compile)")
    return "\n".join(lines)


import numpy as np  # noqa: E402  (after the parser: `--help` stays instant)

if __name__ == "__main__":
    sys.exit(main())
