"""Serving speed: an exported kbert SavedModel answering raw text, in-process.

Exports a classifier (default: all-MiniLM-L6-v2 with a 2-class head, sequence
length 128) with `kbert.export`, loads the SavedModel with
`tf.saved_model.load` and calls its `serving_default` signature on SST-2 dev
sentences (their real lengths), as a model server would:

- one request of one sentence at a time: latency p50 / p90 / p99;
- requests of several sentences (`--batch-sizes`, default 8 and 32): latency
  and sentences/s;
- several client threads at once, each sending one-sentence requests:
  sentences/s, latency percentiles, and the number of failed requests;
- where the time of a one-sentence request goes: a `tf.profiler` trace of
  `--profile-requests` requests, with the time of the graph's ops summed by
  part (tokenize and pack; embeddings and pooler; Transformer blocks; the
  classifier's head; the rest: sorting rows into runs, softmax, labels) and,
  as "outside ops", what is left of the p50 latency (the executor between
  ops, the call from Python). Tracing slows ops a little; the parts compare,
  the sum is not a latency.

`--intra-op-threads` and `--inter-op-threads` size TensorFlow's two thread
pools, as TF Serving's `--tensorflow_intra_op_parallelism` and
`--tensorflow_inter_op_parallelism` do; 0 (the default) leaves TensorFlow's
choice, one thread per core each.

Every row is measured `--repeats` times (default 3) in turn; the table gives
the median of each figure, the JSON each round too. Prints tables and writes
JSON (default `benchmarks/results/serving.json`).

    .venv/bin/python benchmarks/serving.py            # about a minute on 2 cores
    .venv/bin/python benchmarks/serving.py --lora-rank 8 --out benchmarks/results/serving_lora.json
    .venv/bin/python benchmarks/serving.py --intra-op-threads 1
    .venv/bin/python benchmarks/serving.py --quick    # BERT-tiny, fewer requests
"""

import argparse
import collections
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from timing import cpu_model, graph_op_events

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def percentiles(seconds):
    milliseconds = 1000 * np.asarray(seconds)
    return {f"p{q}_ms": float(np.percentile(milliseconds, q)) for q in (50, 90, 99)}


def timed_calls(serve, requests):
    latencies = []
    for texts in requests:
        start = time.perf_counter()
        serve(texts)
        latencies.append(time.perf_counter() - start)
    return latencies


def concurrent_calls(serve, requests, threads):
    """Each thread sends its share of the requests; returns latencies, errors and wall time."""
    latencies, errors, lock = [], [], threading.Lock()

    def client(share):
        for texts in share:
            start = time.perf_counter()
            try:
                serve(texts)
            except Exception as error:  # a failed request is counted, not fatal
                with lock:
                    errors.append(repr(error))
                continue
            with lock:
                latencies.append(time.perf_counter() - start)

    workers = [threading.Thread(target=client, args=(requests[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies, errors, time.perf_counter() - start


# Parts of a request's graph, by the first name in its ops' scopes that matches.
PARTS = (
    ("Transformer blocks", "transformer_layer"),
    ("embeddings and pooler", "/encoder"),
    ("head", "/logits"),
    ("tokenize and pack", "/preprocessor"),
)
OTHER_PART = "runs, softmax, labels"


def op_times_by_part(logdir):
    """Picoseconds of the graph's ops in a trace, summed by `PARTS` (the rest in `OTHER_PART`)."""
    by_part = collections.Counter({name: 0 for name, _ in PARTS} | {OTHER_PART: 0})
    for op, _, _, duration in graph_op_events(logdir):
        part = next((part for part, scope in PARTS if scope in op), OTHER_PART)
        by_part[part] += duration
    return by_part


def breakdown(serve, requests, p50_ms):
    """Op milliseconds per request by part, traced over `requests`, and the p50 latency left outside ops."""
    import tensorflow as tf

    logdir = tempfile.mkdtemp(prefix="kbert-serving-profile-")
    try:
        tf.profiler.experimental.start(logdir)
        for texts in requests:
            serve(texts)
        tf.profiler.experimental.stop()
        by_part = op_times_by_part(logdir)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    parts = {name: picoseconds / 1e9 / len(requests) for name, picoseconds in by_part.items()}
    return {"requests": len(requests), "p50_ms": p50_ms, "op_ms": parts,
            "outside_ops_ms": p50_ms - sum(parts.values())}


def measure(serve, draw, args):
    """One round of every row: `(rows, errors)`."""
    single = timed_calls(serve, draw(args.single_requests, 1))
    batched = {size: timed_calls(serve, draw(args.batches, size)) for size in args.batch_sizes}
    concurrent, errors, concurrent_seconds = concurrent_calls(serve, draw(args.concurrent_requests, 1), args.threads)
    rows = {"one sentence per request": {"requests": len(single), **percentiles(single),
                                         "sentences_per_second": len(single) / sum(single)}}
    for size, latencies in batched.items():
        rows[f"{size} sentences per request"] = {
            "requests": len(latencies), **percentiles(latencies),
            "sentences_per_second": size * len(latencies) / sum(latencies)}
    rows[f"{args.threads} client threads, one sentence each"] = {
        "requests": len(concurrent) + len(errors), **percentiles(concurrent or [0.0]),
        "sentences_per_second": len(concurrent) / concurrent_seconds, "errors": len(errors)}
    return rows, errors


def median_row(rounds):
    """A row's figures as the medians over rounds (errors summed), each round's kept under "rounds"."""
    row = {name: float(np.median([r[name] for r in rounds])) for name in rounds[0] if name not in ("requests", "errors")}
    row["requests"] = sum(r["requests"] for r in rounds)
    if "errors" in rounds[0]:
        row["errors"] = sum(r["errors"] for r in rounds)
    row["rounds"] = rounds
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="all-minilm-l6-v2")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--single-requests", type=int, default=300)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--batches", type=int, default=30, help="requests of each batch size")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--concurrent-requests", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of all rows; the table gives medians")
    parser.add_argument("--profile-requests", type=int, default=50, help="0: no breakdown")
    parser.add_argument("--intra-op-threads", type=int, default=0)
    parser.add_argument("--inter-op-threads", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="BERT-tiny and a tenth of the requests")
    parser.add_argument("--lora-rank", type=int, default=None,
                        help="export a classifier with LoRA adapters of this rank (on all six projections, "
                             "random), which the export merges into the kernels")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "serving.json"))
    args = parser.parse_args()
    if args.quick:
        args.encoder = "tiny"
        args.single_requests, args.batches, args.concurrent_requests, args.repeats = 30, 3, 40, 1
        args.profile_requests = min(args.profile_requests, 10)

    # kbert first: it sets TensorFlow's switches (oneDNN kernels), read when TensorFlow loads.
    import kbert
    import tensorflow as tf

    # Before TensorFlow runs anything: the pools are made once.
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)

    from kbert.checkpoints.loading import resolve_checkpoint
    from kbert.runs.fine_tuning import load_split

    sentences = [str(s) for s in load_split("sst2", "dev")[0]]
    # A preset takes the bert-base-uncased vocabulary that all-MiniLM-L6-v2 ships.
    vocabulary = os.path.join(resolve_checkpoint("all-minilm-l6-v2"), "vocab.txt") if args.encoder in kbert.PRESETS else None
    model = kbert.classifier(args.encoder, num_classes=2, vocabulary=vocabulary,
                             sequence_length=args.sequence_length, class_names=["negative", "positive"])
    if args.lora_rank:
        model.enable_lora(args.lora_rank, targets="all")
        for variable in model.encoder.lora_adapters:  # B is zero when fresh: a real update to merge
            variable.assign(np.random.default_rng(0).normal(scale=0.02, size=variable.shape).astype("float32"))
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        path = kbert.export(model, os.path.join(folder, "sst2"), text_pairs=False)
        export_seconds = time.perf_counter() - start
        start = time.perf_counter()
        signature = tf.saved_model.load(path).signatures["serving_default"]
        load_seconds = time.perf_counter() - start

    def serve(texts):
        return signature(text=tf.constant(texts))["probabilities"].numpy()

    rng = np.random.default_rng(0)

    def draw(count, size):
        return [[sentences[i] for i in rng.integers(len(sentences), size=size)] for _ in range(count)]

    timed_calls(serve, draw(10, 1) + [texts for size in args.batch_sizes for texts in draw(2, size)])  # warm-up
    repeats = [measure(serve, draw, args) for _ in range(args.repeats)]
    rows = {name: median_row([rows[name] for rows, _ in repeats]) for name in repeats[0][0]}
    errors = [error for _, found in repeats for error in found]
    single_p50_ms = rows["one sentence per request"]["p50_ms"]
    parts = breakdown(serve, draw(args.profile_requests, 1), single_p50_ms) if args.profile_requests else None
    results = {
        "settings": vars(args), "machine": cpu_model(), "cpus": os.cpu_count(),
        "tensorflow": tf.__version__, "lora_rank": args.lora_rank, "export_seconds": export_seconds,
        "load_seconds": load_seconds,
        "mean_sentence_characters": float(np.mean([len(s) for s in sentences])), "rows": rows,
        "one_sentence_breakdown": parts, "errors": errors[:5],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")

    lora = f", LoRA rank {args.lora_rank} merged" if args.lora_rank else ""
    print(f"\nSavedModel of a {args.encoder} classifier{lora} (sequence length {args.sequence_length}), "
          f"SST-2 dev sentences; threads intra-op {args.intra_op_threads or 'auto'}, inter-op "
          f"{args.inter_op_threads or 'auto'}; export {export_seconds:.1f} s, load {load_seconds:.1f} s; medians of "
          f"{args.repeats} rounds")
    print("| requests | count | p50 ms | p90 ms | p99 ms | sentences/s | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in rows.items():
        print(f"| {name} | {row['requests']} | {row['p50_ms']:.1f} | {row['p90_ms']:.1f} | {row['p99_ms']:.1f} | "
              f"{row['sentences_per_second']:.1f} | {row.get('errors', 0)} |")
    if parts:
        print(f"\nOne sentence per request, p50 {parts['p50_ms']:.2f} ms: op time by part (ms per request, "
              f"{parts['requests']} traced requests)")
        for name, ms in {**parts["op_ms"], "outside ops": parts["outside_ops_ms"]}.items():
            print(f"| {name} | {ms:.2f} |")
    print(f"Wrote {args.out}")
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[0]}")


if __name__ == "__main__":
    main()
