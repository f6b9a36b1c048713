"""Speed of kbert beside keras-hub and PyTorch (Hugging Face transformers), in one run.

Every measurement runs in a fresh process, and the paths alternate: each
round runs every path once per preset, the next round in reverse order, so
a slow spell of the machine does not land on one path only. Paths:

- kbert, float32 and `mixed_bfloat16` (`dtype=` of kbert's entry points),
  as `import kbert` sets TensorFlow up (its oneDNN kernels on);
- `kbert-tf-first`: the same, in a process that imports TensorFlow and
  Keras before kbert, as most scripts do (TensorFlow then decides on its
  oneDNN kernels by itself, and kbert warns when they are off);
- keras-hub's `BertBackbone` / `BertTextClassifier`, float32 and
  `mixed_bfloat16`, with TensorFlow's defaults (oneDNN only on CPUs with
  AVX-512 VNNI or AMX; run `TF_ENABLE_ONEDNN_OPTS=1 ... speed.py` to give
  it oneDNN too); the table's last line says which paths had oneDNN;
- transformers' `BertModel` / `BertForSequenceClassification` on PyTorch,
  float32 and bfloat16 autocast (`benchmarks/peers/hf_speed.py`, run in
  `benchmarks/.peer-venv`: make it with `make peer-venv`).

Workloads, for each preset (random weights; the shapes are the presets'):

- `inference`: the encoder's forward pass, batch 32 x 128 tokens;
- `train_step`: one optimizer step of a two-class classifier, batch 16 x 128;
- `fine_tune`: training examples/s of a classifier fitting SST-2 training
  sentences (their real lengths, batch 32, tokenization included), each
  library as its users run it: kbert's `fit` on raw strings; keras-hub's
  `BertTextClassifier` with its default preprocessor; a PyTorch loop with
  dynamic padding and the fast HF tokenizer. For tiny and small only, and
  keras-hub for tiny only, unless `--fine-tune-presets` says otherwise
  (keras-hub pads every text to 512 tokens: one of its batches takes 30 s
  at small and minutes at base on 2 cores).

The table gives medians over rounds, GFLOP/s (a forward pass of L layers on
T tokens is L * (2T(4H^2 + 2HI) + 4T^2 H) FLOPs; a training step three
times that), the share of the matmul peak measured in TensorFlow in the same
run (BERT-base's feed-forward matmul, 4096 x 768 by 768 x 3072), and
ratios of each kbert path to keras-hub and PyTorch at the same precision.

    .venv/bin/python benchmarks/speed.py          # tiny, small, base; 2 rounds (34 min here)
    .venv/bin/python benchmarks/speed.py --quick  # tiny and small, 1 round, short budgets
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Each worker starts from the environment the benchmark was given, so a peer
# runs TensorFlow as its own users get it; kbert's workers (and the matmul
# peak) import kbert first, which sets its TensorFlow switches (oneDNN
# kernels) before TensorFlow loads, except `kbert-tf-first`'s, which import
# TensorFlow and Keras first, as most scripts begin.
USER_ENVIRONMENT = dict(os.environ)
WORKER_JOB = json.loads(sys.argv[sys.argv.index("--worker") + 1]) if "--worker" in sys.argv else None
WORKER_LIBRARY = WORKER_JOB.get("library", "kbert") if WORKER_JOB else "kbert"
if WORKER_LIBRARY == "kbert-tf-first":
    import keras  # noqa: F401
    import tensorflow  # noqa: F401
if WORKER_LIBRARY.startswith("kbert"):
    import kbert  # noqa: F401

import keras  # noqa: E402

from timing import matmul_gflops, timed  # noqa: E402

PEER_VENV = Path(__file__).parent / ".peer-venv"
VOCABULARY_SIZE = 30522
SEQUENCE_LENGTH = 128
BATCH_SIZES = {"inference": 32, "train_step": 16, "fine_tune": 32}
WORKLOADS = ("inference", "train_step", "fine_tune")
LIBRARIES = ("kbert", "kbert-tf-first", "keras-hub", "pytorch")
PRECISIONS = ("fp32", "bf16")
PATHS = [f"{library} {precision}" for library in LIBRARIES for precision in PRECISIONS]
# Per preset: warm-up steps, then timed steps for at least `budget_seconds`.
TIMING = {
    "tiny": {"warmup": 3, "budget_seconds": 5, "min_steps": 5},
    "small": {"warmup": 1, "budget_seconds": 3, "min_steps": 3},
    # A BERT-base step takes 2-15 s (AVX-512 to AVX2 CPUs): the median of 3.
    "base": {"warmup": 1, "budget_seconds": 0, "min_steps": 3},
}
QUICK_TIMING = {
    "tiny": {"warmup": 2, "budget_seconds": 3, "min_steps": 3},
    "small": {"warmup": 1, "budget_seconds": 4, "min_steps": 2},
    "base": {"warmup": 1, "budget_seconds": 6, "min_steps": 1},
}
# keras-hub's classifier pads every text to its default 512 tokens: a batch of
# 32 such texts takes 30 s at small and minutes at base here, so beyond tiny
# its fine-tuning is opt-in (--fine-tune-presets), as base is for every path.
FINE_TUNE_PRESETS = ("tiny", "small")
KERAS_HUB_FINE_TUNE_PRESETS = ("tiny",)
FINE_TUNE_EXAMPLES = 8192
PEAK_HIDDEN_DIM = 768


def forward_flops(shape, length=SEQUENCE_LENGTH):
    hidden, intermediate = shape["hidden_dim"], shape["intermediate_dim"]
    per_layer = 2 * length * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * length * length * hidden
    return shape["num_layers"] * per_layer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny and small, one round, short budgets")
    parser.add_argument("--presets", nargs="+", help="default: tiny small base (quick: tiny small)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, metavar="PATH",
                        help=f"default: all of {PATHS}, but PyTorch bf16 for tiny only on a CPU "
                             "without bf16 units (AVX-512 BF16 or AMX)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, help="default: 2 (quick: 1)")
    parser.add_argument("--fine-tune-presets", nargs="+",
                        help=f"presets the fine_tune workload runs for, every path (default: "
                             f"{' '.join(FINE_TUNE_PRESETS)}; keras-hub {' '.join(KERAS_HUB_FINE_TUNE_PRESETS)})")
    parser.add_argument("--job-timeout", type=float, default=900,
                        help="seconds one path's process may take; a slower one is left out of the table")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "speed.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(json.loads(args.worker))
    # Without bf16 units PyTorch's bf16 autocast runs BERT at a tenth of its
    # float32 speed: past tiny, each such job would take many minutes.
    tiny_only = set() if args.paths or has_bf16_units() else {"pytorch bf16"}
    args.paths = args.paths or PATHS
    fine_tune_presets = {library: args.fine_tune_presets or list(
        KERAS_HUB_FINE_TUNE_PRESETS if library == "keras-hub" else FINE_TUNE_PRESETS) for library in LIBRARIES}

    presets = args.presets or (["tiny", "small"] if args.quick else ["tiny", "small", "base"])
    rounds = args.rounds or (1 if args.quick else 2)
    if any(path.startswith("pytorch") for path in args.paths) and not (PEER_VENV / "bin" / "python").exists():
        raise SystemExit(f"No peer environment at {PEER_VENV}: run `make peer-venv` first, "
                         "or leave the pytorch paths out with --paths.")
    started = time.time()
    with tempfile.TemporaryDirectory() as folder:
        data = write_fine_tune_data(folder) if "fine_tune" in args.workloads else None
        peaks = {precision: run_job({"path": "matmul", "precision": precision})
                 for precision in PRECISIONS}
        runs = []
        for round_index in range(rounds):
            order = args.paths if round_index % 2 == 0 else args.paths[::-1]
            for preset in presets:
                for path in order:
                    workloads = [w for w in args.workloads
                                 if w != "fine_tune" or preset in fine_tune_presets[path.split()[0]]]
                    if not workloads or (path in tiny_only and preset != "tiny"):
                        continue
                    job = make_job(path, preset, workloads, data, args.quick)
                    result = run_job(job, args.job_timeout)
                    runs.append({"round": round_index, "preset": preset, "path": path, **result})
                    print(f"round {round_index + 1}/{rounds} {preset:5s} {path:14s} "
                          + "  ".join(f"{w} {rate_of(r):.2f}" for w, r in result["results"].items())
                          + f"  ({result['process_seconds']:.0f} s)", flush=True)
    rows = summarize(runs, peaks, presets, args.paths, args.workloads)
    print_table(rows, peaks)
    if tiny_only:
        print(f"{', '.join(sorted(tiny_only))}: tiny only, this CPU has no bf16 units (name it in --paths "
              "to run it for every preset)")
    if "fine_tune" in args.workloads and not args.fine_tune_presets:
        print(f"fine_tune: {' '.join(FINE_TUNE_PRESETS)}, keras-hub {' '.join(KERAS_HUB_FINE_TUNE_PRESETS)} "
              "only (its 512-token batches; --fine-tune-presets runs every path for the presets named)")
    onednn = {run["path"]: run["onednn"] for run in runs if "onednn" in run}
    if onednn:
        print("TensorFlow's oneDNN kernels: "
              + ", ".join(f"{path} {'on' if on else 'off'}" for path, on in onednn.items()))
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "platform": platform.platform()},
        "settings": {"sequence_length": SEQUENCE_LENGTH, "batch_sizes": BATCH_SIZES, "rounds": rounds,
                     "fine_tune_presets": fine_tune_presets,
                     "tiny_only_paths": sorted(tiny_only), "fine_tune_examples": FINE_TUNE_EXAMPLES,
                     "timing": QUICK_TIMING if args.quick else TIMING, "quick": args.quick},
        "matmul_peak_gflops": {p: peaks[p]["gflops"] for p in PRECISIONS},
        "rows": rows,
        "runs": runs,
        "minutes": (time.time() - started) / 60,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from kbert.io.atomic_files import write_atomically

    # A whole report or the old one, never half of one.
    write_atomically(str(out), lambda path: Path(path).write_text(json.dumps(report, indent=2) + "\n"))
    print(f"{report['minutes']:.1f} min; JSON in {args.out}")


def has_bf16_units():
    """Whether the CPU has bf16 matmul instructions (AVX-512 BF16 or AMX); True when unknown."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_fine_tune_data(folder):
    """A fixed shuffled sample of SST-2 training sentences, as JSON every worker reads."""
    from kbert.checkpoints.loading import resolve_checkpoint
    from kbert.runs.fine_tuning import load_split, sample_examples

    texts, labels = sample_examples(*load_split("sst2", "train"), FINE_TUNE_EXAMPLES, 0)
    path = os.path.join(folder, "sst2.json")
    Path(path).write_text(json.dumps({"texts": list(texts), "labels": [int(y) for y in labels]}))
    vocabulary = os.path.join(resolve_checkpoint("all-minilm-l6-v2"), "vocab.txt")
    return {"data": path, "vocabulary": vocabulary}


def make_job(path, preset, workloads, data, quick):
    from kbert.models.presets import preset_config

    library, precision = path.split()
    return {
        "path": path, "library": library, "precision": precision, "preset": preset,
        "shape": preset_config(preset), "workloads": list(workloads),
        "vocabulary_size": VOCABULARY_SIZE, "sequence_length": SEQUENCE_LENGTH,
        "inference_batch_size": BATCH_SIZES["inference"], "train_batch_size": BATCH_SIZES["train_step"],
        "fine_tune_batch_size": BATCH_SIZES["fine_tune"],
        "timing": (QUICK_TIMING if quick else TIMING)[preset], **(data or {}),
    }


def run_job(job, job_timeout=None):
    """Runs one job in a fresh process and returns the JSON it prints last (no results if timed out)."""
    if job.get("library") == "pytorch":
        command = [str(PEER_VENV / "bin" / "python"), str(Path(__file__).parent / "peers" / "hf_speed.py"),
                   json.dumps(job)]
    else:
        command = [sys.executable, __file__, "--worker", json.dumps(job)]
    started = time.perf_counter()
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=job_timeout,
                                 env=USER_ENVIRONMENT)
    except subprocess.TimeoutExpired:
        # PyTorch's bf16 autocast without AVX-512 BF16 / AMX runs BERT-base for minutes a step.
        return {"results": {}, "timed_out_after_seconds": job_timeout, "process_seconds": job_timeout}
    if process.returncode:
        raise SystemExit(f"{job['path']} ({job.get('preset')}) failed:\n{process.stderr[-4000:]}")
    # The process's whole wall time (start-up, building, tracing, timing): what each job costs the run.
    return {**json.loads(process.stdout.strip().splitlines()[-1]),
            "process_seconds": time.perf_counter() - started}


def rate_of(result):
    return result.get("sequences_per_second", result.get("examples_per_second"))


def summarize(runs, peaks, presets, paths, workloads):
    rows = []
    for preset in presets:
        for workload in workloads:
            medians = {}
            for path in paths:
                rates = [rate_of(r["results"][workload]) for r in runs
                         if r["preset"] == preset and r["path"] == path and workload in r["results"]]
                if rates:
                    medians[path] = statistics.median(rates)
            if not medians:
                continue
            for path in medians:
                library, precision = path.split()
                row = {"preset": preset, "workload": workload, "path": path, "rate": medians[path],
                       "unit": "examples/s" if workload == "fine_tune" else "sequences/s"}
                if workload != "fine_tune":
                    from kbert.models.presets import preset_config

                    flops = forward_flops(preset_config(preset)) * (3 if workload == "train_step" else 1)
                    row["gflops"] = medians[path] * flops / 1e9
                    row["percent_of_matmul_peak"] = 100 * row["gflops"] / peaks[precision]["gflops"]
                if library.startswith("kbert"):
                    for peer in ("keras-hub", "pytorch"):
                        if f"{peer} {precision}" in medians:
                            row[f"vs {peer}"] = medians[path] / medians[f"{peer} {precision}"]
                rows.append(row)
    return rows


def print_table(rows, peaks):
    print(f"\nmatmul peak (TensorFlow, 4096 x {PEAK_HIDDEN_DIM} by {PEAK_HIDDEN_DIM} x {4 * PEAK_HIDDEN_DIM}): "
          + ", ".join(f"{p} {peaks[p]['gflops']:.0f} GFLOP/s" for p in PRECISIONS))
    header = f"{'preset':6s} {'workload':10s} {'path':14s} {'rate':>9s} {'GFLOP/s':>8s} {'% peak':>7s} " \
             f"{'vs keras-hub':>12s} {'vs pytorch':>10s}"
    print(header)
    print("-" * len(header))
    for row in rows:
        def cell(key, width, form):
            return f"{row[key]:{width}{form}}" if key in row else " " * width
        print(f"{row['preset']:6s} {row['workload']:10s} {row['path']:14s} {row['rate']:9.2f} "
              f"{cell('gflops', 8, '.1f')} {cell('percent_of_matmul_peak', 7, '.1f')} "
              f"{cell('vs keras-hub', 12, '.2f')} {cell('vs pytorch', 10, '.2f')}")
    print("rate: sequences/s (inference, train_step) or examples/s (fine_tune), medians over rounds")


# === Workers (one fresh process per job) ===


def run_worker(job):
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    if job["path"] == "matmul":
        result = matmul_peak(tf, job)
    else:
        if job["library"] == "keras-hub" and job["precision"] == "bf16":
            keras.config.set_dtype_policy("mixed_bfloat16")
        result = {"results": {w: WORKER_WORKLOADS[w](job) for w in job["workloads"]}}
    from tensorflow.python.util import _pywrap_util_port

    result["versions"] = {"tensorflow": tf.__version__, "keras": keras.__version__}
    result["onednn"] = bool(_pywrap_util_port.IsMklEnabled())
    print(json.dumps(result))


def matmul_peak(tf, job):
    """GFLOP/s of BERT-base's feed-forward matmul (H 768), in TensorFlow: the machine's peak (`timing.matmul_gflops`)."""
    dtype = tf.bfloat16 if job["precision"] == "bf16" else tf.float32
    gflops = matmul_gflops(tf, BATCH_SIZES["inference"] * SEQUENCE_LENGTH, PEAK_HIDDEN_DIM, dtype)
    return {"gflops": max(gflops.values()), "forms": gflops, "hidden_dim": PEAK_HIDDEN_DIM}


def random_inputs(job, batch_size):
    """Model inputs (kbert and keras-hub name them alike) of random tokens, no padding."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (batch_size, job["sequence_length"])
    return {"token_ids": rng.integers(0, job["vocabulary_size"], shape).astype("int32"),
            "segment_ids": np.zeros(shape, "int32"), "padding_mask": np.ones(shape, "int32")}


def dtype_of(job):
    return "mixed_bfloat16" if job["precision"] == "bf16" else "float32"


def keras_hub_backbone(job):
    import keras_hub

    shape = job["shape"]
    return keras_hub.models.BertBackbone(
        vocabulary_size=job["vocabulary_size"], num_layers=shape["num_layers"],
        num_heads=shape["num_heads"], hidden_dim=shape["hidden_dim"],
        intermediate_dim=shape["intermediate_dim"], max_sequence_length=512)


def inference(job):
    import tensorflow as tf

    if job["library"].startswith("kbert"):
        model = kbert.Encoder.from_preset(job["preset"], vocabulary_size=job["vocabulary_size"],
                                          dtype=dtype_of(job))
    else:
        model = keras_hub_backbone(job)
    inputs = {k: tf.constant(v) for k, v in random_inputs(job, job["inference_batch_size"]).items()}
    forward = tf.function(lambda x: tf.reduce_sum(tf.cast(model(x, training=False)["sequence_output"], tf.float32)))
    seconds, steps = timed(lambda: forward(inputs).numpy(), **job["timing"])
    return {"sequences_per_second": job["inference_batch_size"] / seconds, "steps": steps}


def classifier(job, with_preprocessor):
    """A two-class classifier of the job's library; kbert's compiles its own BERT recipe."""
    import keras_hub

    if job["library"].startswith("kbert"):
        return kbert.classifier(job["preset"], num_classes=2, vocabulary=job.get("vocabulary") or
                                bert_vocabulary(), sequence_length=job["sequence_length"],
                                dtype=dtype_of(job))
    preprocessor = None
    if with_preprocessor:
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=job["vocabulary"], lowercase=True)
        preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer)
    model = keras_hub.models.BertTextClassifier(keras_hub_backbone(job), num_classes=2, preprocessor=preprocessor)
    model.compile(optimizer=keras.optimizers.AdamW(5e-5, weight_decay=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def bert_vocabulary():
    from kbert.checkpoints.loading import resolve_checkpoint

    return os.path.join(resolve_checkpoint("all-minilm-l6-v2"), "vocab.txt")


def train_step(job):
    import numpy as np

    model = classifier(job, with_preprocessor=False)
    inputs = random_inputs(job, job["train_batch_size"])
    labels = np.random.default_rng(1).integers(0, 2, job["train_batch_size"])

    def step():
        model.train_on_batch(inputs, labels)

    seconds, steps = timed(step, **job["timing"])
    return {"sequences_per_second": job["train_batch_size"] / seconds, "steps": steps}


def fine_tune(job):
    """Training examples/s of `fit` on raw SST-2 sentences, after `warmup` batches."""
    data = json.load(open(job["data"]))
    model = classifier(job, with_preprocessor=True)
    clock = TimeBudget(job["timing"]["warmup"], job["timing"]["budget_seconds"], job["fine_tune_batch_size"])
    model.fit(data["texts"], data["labels"], batch_size=job["fine_tune_batch_size"], epochs=1,
              verbose=0, callbacks=[clock])
    return {"examples_per_second": clock.examples / clock.seconds, "examples": clock.examples}


class TimeBudget(keras.callbacks.Callback):
    """Times `fit`'s batches after `warmup` of them, and stops it once `budget_seconds` have passed."""

    def __init__(self, warmup, budget_seconds, batch_size):
        super().__init__()
        self.warmup, self.budget_seconds, self.batch_size = warmup, budget_seconds, batch_size
        self.batches, self.examples, self.start, self.seconds = 0, 0, None, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        now = time.perf_counter()
        if self.batches == self.warmup:
            self.start = now
        elif self.start is not None:
            self.examples += self.batch_size
            self.seconds = now - self.start
            if self.seconds > self.budget_seconds:
                self.model.stop_training = True


WORKER_WORKLOADS = {"inference": inference, "train_step": train_step, "fine_tune": fine_tune}

if __name__ == "__main__":
    main()
