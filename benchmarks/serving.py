"""Serving speed: an exported kbert SavedModel answering raw text, in-process.

Exports a classifier (default: all-MiniLM-L6-v2 with a 2-class head, sequence
length 128) with `kbert.export`, loads the SavedModel with
`tf.saved_model.load` and calls its `serving_default` signature on SST-2 dev
sentences (their real lengths), as a model server would:

- one request of one sentence at a time: latency p50 / p90 / p99;
- requests of a batch of sentences: latency and sentences/s;
- several client threads at once, each sending one-sentence requests:
  sentences/s, latency percentiles, and the number of failed requests.

Prints a table and writes JSON (default `benchmarks/results/serving.json`).

    .venv/bin/python benchmarks/serving.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/serving.py --quick    # BERT-tiny, fewer requests
"""

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="all-minilm-l6-v2")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--single-requests", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--concurrent-requests", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="BERT-tiny and a tenth of the requests")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "serving.json"))
    args = parser.parse_args()
    if args.quick:
        args.encoder = "tiny"
        args.single_requests, args.batches, args.concurrent_requests = 30, 3, 40

    import tensorflow as tf

    import kbert
    from kbert.checkpoints.loading import resolve_checkpoint
    from kbert.fine_tuning import load_split

    sentences = [str(s) for s in load_split("sst2", "dev")[0]]
    # A preset takes the bert-base-uncased vocabulary that all-MiniLM-L6-v2 ships.
    vocabulary = os.path.join(resolve_checkpoint("all-minilm-l6-v2"), "vocab.txt") if args.encoder in kbert.PRESETS else None
    model = kbert.classifier(args.encoder, num_classes=2, vocabulary=vocabulary,
                             sequence_length=args.sequence_length, class_names=["negative", "positive"])
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

    timed_calls(serve, draw(10, 1) + draw(2, args.batch_size))  # warm-up: first calls trace and allocate
    single = timed_calls(serve, draw(args.single_requests, 1))
    batches = timed_calls(serve, draw(args.batches, args.batch_size))
    concurrent, errors, concurrent_seconds = concurrent_calls(serve, draw(args.concurrent_requests, 1), args.threads)

    rows = {
        "one sentence per request": {"requests": len(single), **percentiles(single),
                                     "sentences_per_second": len(single) / sum(single)},
        f"{args.batch_size} sentences per request": {
            "requests": len(batches), **percentiles(batches),
            "sentences_per_second": args.batch_size * len(batches) / sum(batches)},
        f"{args.threads} client threads, one sentence each": {
            "requests": len(concurrent) + len(errors), **percentiles(concurrent or [0.0]),
            "sentences_per_second": len(concurrent) / concurrent_seconds, "errors": len(errors)},
    }
    results = {
        "settings": vars(args), "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "tensorflow": tf.__version__, "export_seconds": export_seconds, "load_seconds": load_seconds,
        "mean_sentence_characters": float(np.mean([len(s) for s in sentences])), "rows": rows,
        "errors": errors[:5],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")

    print(f"\nSavedModel of a {args.encoder} classifier (sequence length {args.sequence_length}), "
          f"SST-2 dev sentences; export {export_seconds:.1f} s, load {load_seconds:.1f} s")
    print("| requests | count | p50 ms | p90 ms | p99 ms | sentences/s | errors |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in rows.items():
        print(f"| {name} | {row['requests']} | {row['p50_ms']:.1f} | {row['p90_ms']:.1f} | {row['p99_ms']:.1f} | "
              f"{row['sentences_per_second']:.1f} | {row.get('errors', 0)} |")
    print(f"Wrote {args.out}")
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[0]}")


if __name__ == "__main__":
    main()
