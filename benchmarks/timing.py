"""Timing shared by the benchmarks' workers (kbert's environment and the peer one): no dependencies."""

import json
import os
import platform
import statistics
import time


def timed(step, warmup, budget_seconds, min_steps):
    """Seconds per call of `step`: the median after `warmup` calls, over at least `min_steps`."""
    for _ in range(warmup):
        step()
    times = []
    start = time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < budget_seconds:
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), len(times)


def matmul_gflops(tf, tokens, hidden, dtype):
    """GFLOP/s of a `(tokens, hidden) x (hidden, 4 hidden)` matmul in TensorFlow (BERT's feed-forward): the machine's peak.

    `{form: GFLOP/s}` of a plain matmul and one with a bias added (which
    oneDNN runs as another kernel), each timed for a few seconds.
    """
    a = tf.Variable(tf.cast(tf.random.normal([tokens, hidden]), dtype))
    b = tf.Variable(tf.cast(tf.random.normal([hidden, 4 * hidden]), dtype))
    bias = tf.Variable(tf.zeros([4 * hidden], dtype))
    forms = {
        "matmul": lambda: tf.matmul(a, b),
        "matmul + bias": lambda: tf.nn.bias_add(tf.matmul(a, b), bias),
    }
    gflops = {}
    for name, form in forms.items():
        # One row of the result leaves the graph: the sum is not timed with the matmul.
        product = tf.function(lambda form=form: tf.reduce_sum(tf.cast(form()[:1], tf.float32)))
        seconds, _ = timed(lambda: product().numpy(), warmup=3, budget_seconds=5, min_steps=10)
        gflops[name] = 2 * tokens * hidden * 4 * hidden / seconds / 1e9
    return gflops


def graph_op_events(logdir):
    """`(op name, op type, thread, picoseconds)` of each graph op in the `tf.profiler` traces under `logdir`."""
    import glob
    from pathlib import Path

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    for path in glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True):
        space = xplane_pb2.XSpace()
        space.ParseFromString(Path(path).read_bytes())
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    # Graph ops are named "scope/op:OpType"; runtime events have no such form.
                    op, _, op_type = name.rpartition(":")
                    if op and op_type and " " not in name and "/" in op:
                        yield name, op_type, line.name, event.duration_ps


def cpu_model():
    """The CPU's model name, as `lscpu` shows it ("Model name"), else the platform's processor."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_json(path, report):
    """Writes `report` to `path` (a `Path`) whole or not at all: a run cut short leaves the last full file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.partial")
    temporary.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(temporary, path)
