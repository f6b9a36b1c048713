"""Does kbert's pretraining learn as fast as Hugging Face's? Learning curves on identical batches.

kbert's pipeline (`pretraining_dataset`: WordPiece, sentence pairs, 80/10/10
masking, new masks each pass) writes a fixed run of training batches and a
held-out set drawn from the benchmark corpus of `benchmarks/pretraining.py`
(each file's last 5 % of lines held out, with every chosen token [MASK]ed:
the predictions that need the context). Then two models of the same shape
train on exactly those batches, in the same order, with the same recipe
(AdamW, weight decay 0.01, gradients clipped to norm 1, warm-up over 10 %
of the steps, then linear decay):

- `kbert.Pretrainer` (TensorFlow), compiled by default apart from the peak
  learning rate;
- transformers' `BertForPreTraining` (PyTorch) in the peer environment
  (`benchmarks/peers/hf_pretraining.py`; make it with `make peer-venv`).

Both are scored on the held-out batches every `--eval-every` steps. Their
initial weights differ (each library draws its own), so the curves agree
only within run-to-run noise; a kbert defect in the masked-LM head, the
losses, the optimiser or the schedule shows as a gap.

Prints a table and writes JSON (default `benchmarks/results/pretraining_parity.json`).

    .venv/bin/python benchmarks/pretraining_parity.py           # tiny, 2,000 steps: about 20 minutes here
    .venv/bin/python benchmarks/pretraining_parity.py --quick   # 40 steps, a smoke run
"""

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import kbert  # noqa: E402  (before TensorFlow: it sets TensorFlow's switches)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kbert.models.presets import preset_config  # noqa: E402
from pretraining import split_corpus, write_results  # noqa: E402  (benchmarks/pretraining.py)

PEER_PYTHON = Path(__file__).parent / ".peer-venv" / "bin" / "python"
PEER_SCRIPT = Path(__file__).parent / "peers" / "hf_pretraining.py"


def write_batches(dataset, count, path, batch_size):
    """Saves the first `count` full batches of `dataset` (repeated as needed) as one `.npz`."""
    arrays = {}
    taken = 0
    for x, y, sample_weight in dataset.repeat():
        # A pass's last batch may be short; one shape keeps the file a stack of arrays.
        if int(x["token_ids"].shape[0]) != batch_size:
            continue
        named = {**x, "mlm_labels": y["mlm"], "nsp_labels": y["nsp"], "mlm_weights": sample_weight["mlm"]}
        for key, value in named.items():
            arrays.setdefault(key, []).append(value.numpy())
        taken += 1
        if taken == count:
            break
    np.savez(path, **{key: np.stack(values) for key, values in arrays.items()})


def batches_of(path):
    """The batches of a `.npz` written by `write_batches`, as `(x, y, sample_weight)` in order."""
    arrays = np.load(path)
    x = {key: arrays[key] for key in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
    y = {"mlm": arrays["mlm_labels"], "nsp": arrays["nsp_labels"]}
    sample_weight = {"mlm": arrays["mlm_weights"], "nsp": np.ones_like(arrays["nsp_labels"], np.float32)}
    return tf.data.Dataset.from_tensor_slices((x, y, sample_weight))


class HeldOutCurve(keras.callbacks.Callback):
    """Scores the model on the held-out batches every `every` steps and after the last."""

    def __init__(self, held_out, every, last_step):
        super().__init__()
        self.held_out, self.every, self.last_step = held_out, every, last_step
        self.curve = []

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0 or step == self.last_step:
            scores = self.model.evaluate(self.held_out, return_dict=True, verbose=0)
            self.curve.append({"step": step, **{k: float(v) for k, v in scores.items() if k != "loss"}})


def train_kbert(args, vocabulary_size, train_path, held_out_path, shape):
    keras.utils.set_random_seed(args.seed)
    encoder = kbert.Encoder(vocabulary_size=vocabulary_size, **shape)
    pretrainer = kbert.Pretrainer(encoder)
    pretrainer.compile(learning_rate=args.learning_rate)
    curve = HeldOutCurve(batches_of(held_out_path).cache(), args.eval_every, args.steps)
    start = time.perf_counter()
    pretrainer.fit(batches_of(train_path), epochs=1, callbacks=[curve], shuffle=False, verbose=0)
    return {"curve": curve.curve, "train_seconds": time.perf_counter() - start}


def train_peer(args, vocabulary_size, train_path, held_out_path, shape):
    job = {"train": train_path, "held_out": held_out_path, "vocabulary_size": vocabulary_size,
           "shape": shape, "learning_rate": args.learning_rate, "eval_every": args.eval_every,
           "seed": args.seed}
    process = subprocess.run([str(PEER_PYTHON), str(PEER_SCRIPT), json.dumps(job)],
                             capture_output=True, text=True)
    if process.returncode:
        raise SystemExit(f"The PyTorch run failed:\n{process.stderr[-4000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 steps, for a smoke run")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="peak learning rate")
    parser.add_argument("--vocabulary-size", type=int, default=8192)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--held-out-batches", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "pretraining_parity.json"))
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.held_out_batches = 40, 20, 4
    if not PEER_PYTHON.exists():
        raise SystemExit(f"No peer environment at {PEER_PYTHON.parent.parent}: run `make peer-venv` first.")

    # One shape for both libraries, dropout included (BERT's 0.1).
    shape = {**preset_config(args.preset), "dropout": 0.1}
    results = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as folder:
        train_files, held_out_files = split_corpus(folder)
        vocabulary = kbert.learn_vocabulary(files=[train_files], vocabulary_size=args.vocabulary_size,
                                            verbose=False)
        options = dict(vocabulary=vocabulary, sequence_length=args.sequence_length,
                       batch_size=args.batch_size, seed=args.seed, verbose=False)
        train_path, held_out_path = f"{folder}/train.npz", f"{folder}/held_out.npz"
        write_batches(kbert.pretraining_dataset([train_files], **options), args.steps, train_path,
                      args.batch_size)
        write_batches(kbert.pretraining_dataset([held_out_files], shuffle_buffer=0, mask_token_rate=1.0,
                                                random_token_rate=0.0, **options),
                      args.held_out_batches, held_out_path, args.batch_size)
        print(f"Vocabulary {len(vocabulary)} tokens; {args.steps} training batches written", flush=True)
        results["kbert"] = train_kbert(args, len(vocabulary), train_path, held_out_path, shape)
        print(f"kbert: {results['kbert']['train_seconds']:.0f} s", flush=True)
        results["transformers"] = train_peer(args, len(vocabulary), train_path, held_out_path, shape)
        print(f"transformers: {results['transformers']['train_seconds']:.0f} s", flush=True)

    print()
    print(f"Held-out scores, every chosen token [MASK] ({args.preset}, batch {args.batch_size} x "
          f"{args.sequence_length}, peak learning rate {args.learning_rate:g})")
    print("| step | MLM loss kbert | MLM loss transformers | MLM accuracy kbert | MLM accuracy transformers "
          "| NSP accuracy kbert | NSP accuracy transformers |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for ours, theirs in zip(results["kbert"]["curve"], results["transformers"]["curve"]):
        print(f"| {ours['step']} | {ours['mlm_loss']:.3f} | {theirs['mlm_loss']:.3f} "
              f"| {ours['mlm_accuracy']:.4f} | {theirs['mlm_accuracy']:.4f} "
              f"| {ours['nsp_accuracy']:.4f} | {theirs['nsp_accuracy']:.4f} |")
    results["complete"] = True
    write_results(args.out, results)
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()
