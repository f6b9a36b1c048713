"""Where kbert's time goes: TensorFlow profiler traces of the encoder, summed by op type.

Runs `benchmarks/speed.py`'s inference or training-step workload for a few
steps under `tf.profiler`, then reads the trace (the `.xplane.pb` that
TensorBoard's profile plugin also opens: `--logdir`) and prints the share
of op time per op type (MatMul, BatchMatMulV2, Erf, Softmax, ...) and the
slowest single ops. Op times are summed over threads, so shares, not
milliseconds, compare paths.

    .venv/bin/python benchmarks/op_profile.py --preset base --workload inference
    .venv/bin/python benchmarks/op_profile.py --preset base --workload train_step --precision bf16
    .venv/bin/python benchmarks/op_profile.py --preset tiny --batch-size 1 --sequence-length 32  # one short text
"""

import argparse
import collections
import json
import shutil
import sys
import time
from pathlib import Path

# First: kbert sets TensorFlow's switches (oneDNN kernels), read when TensorFlow
# loads, so both libraries are profiled with them.
import kbert
import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
import speed  # noqa: E402  (the workloads' models and inputs)
from timing import graph_op_events  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--workload", choices=("inference", "train_step"), default="inference")
    parser.add_argument("--precision", choices=speed.PRECISIONS, default="fp32")
    parser.add_argument("--library", choices=("kbert", "keras-hub"), default="kbert")
    parser.add_argument("--batch-size", type=int, help="default: the speed benchmark's (32 inference, 16 training)")
    parser.add_argument("--sequence-length", type=int, help="default: the speed benchmark's (128)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--logdir", default="/tmp/kbert-profile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", help="also write the summary as JSON here")
    args = parser.parse_args()

    job = speed.make_job(f"{args.library} {args.precision}", args.preset, [args.workload], None, quick=False)
    if args.batch_size:
        job["inference_batch_size"] = job["train_batch_size"] = args.batch_size
    if args.sequence_length:
        job["sequence_length"] = args.sequence_length
    if args.library == "keras-hub" and args.precision == "bf16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    step = build_step(job)
    step()  # traced and warmed up outside the profile
    step()
    shutil.rmtree(args.logdir, ignore_errors=True)
    tf.profiler.experimental.start(args.logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall_ms = 1000 * (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()

    by_type, by_op, by_thread, count = op_times(args.logdir)
    total = sum(by_type.values())
    summary = {
        "path": job["path"], "preset": args.preset, "workload": args.workload, "steps": args.steps,
        "batch_size": job["inference_batch_size" if args.workload == "inference" else "train_batch_size"],
        "sequence_length": job["sequence_length"],
        "wall_ms_per_step": wall_ms, "op_ms_per_step": total / 1e9 / args.steps,
        "ops_per_step": count / args.steps,
        "op_type_share_percent": {k: 100 * v / total for k, v in by_type.most_common()},
        "slowest_ops_ms_per_step": {k: v / 1e9 / args.steps for k, v in by_op.most_common(args.top)},
    }
    print(f"{args.library} {args.precision} {args.preset} {args.workload}: {wall_ms:.0f} ms per step; "
          f"op time by type (summed over TF's {len(by_thread)} executor threads, which run ops side "
          f"by side: {total / 1e9 / args.steps:.0f} ms per step), {count / args.steps:.0f} ops per step")
    for name, share in list(summary["op_type_share_percent"].items())[:args.top]:
        print(f"  {name:32s} {share:5.1f} %")
    print("slowest ops (ms per step):")
    for name, ms in summary["slowest_ops_ms_per_step"].items():
        print(f"  {ms:8.1f}  {name[-110:]}")
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


def build_step(job):
    """One call of the workload, blocking until its result is computed."""
    if job["workloads"] == ["inference"]:
        if job["library"] == "kbert":
            model = kbert.Encoder.from_preset(job["preset"], vocabulary_size=job["vocabulary_size"],
                                              dtype=speed.dtype_of(job))
        else:
            model = speed.keras_hub_backbone(job)
        inputs = {k: tf.constant(v) for k, v in speed.random_inputs(job, job["inference_batch_size"]).items()}
        forward = tf.function(lambda x: model(x, training=False)["sequence_output"])
        return lambda: forward(inputs).numpy()
    model = speed.classifier(job, with_preprocessor=False)
    inputs = speed.random_inputs(job, job["train_batch_size"])
    labels = np.random.default_rng(1).integers(0, 2, job["train_batch_size"])
    return lambda: model.train_on_batch(inputs, labels)


def op_times(logdir):
    """Picoseconds of the TensorFlow ops in the trace, per op type, per op and per thread; and how many ran."""
    by_type, by_op, by_thread = collections.Counter(), collections.Counter(), collections.Counter()
    count = 0
    for name, op_type, thread, duration in graph_op_events(logdir):
        by_type[op_type] += duration
        by_op[name] += duration
        by_thread[thread] += duration
        count += 1
    return by_type, by_op, by_thread, count


if __name__ == "__main__":
    main()
