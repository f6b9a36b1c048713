"""ALBERT against BERT, and sentence-order prediction against next-sentence prediction, at one CPU budget.

Four encoders of the same depth and width (default: mini, L4 H256 A4) are
pretrained on the raw text of the data folder (WikiText-2 valid and test,
two Gutenberg books, Tiny Shakespeare; each file's last 5 % of lines held
out), each for the same wall-clock budget (`--minutes`, measured speed times
budget = steps, so every row gets the same CPU time, not the same steps; a
row whose speed drops is stopped at 110 % of the budget):

- BERT and ALBERT (E = 128, one shared block, GELU's tanh form) crossed with
- next-sentence prediction (NSP: B follows A, or comes from another
  document) and sentence-order prediction (SOP: A then B, or B then A).

For each: parameters, pretraining steps/s, held-out masked-LM accuracy (also
with every chosen token [MASK]ed), the pair head's accuracy on held-out NSP
pairs *and* on held-out SOP pairs (a NSP head scores SOP pairs as "in order"
= IsNext, and a SOP head NSP pairs as "IsNext" = in order: the crossed test
of the ALBERT paper, section 4.6), and SST-2 dev accuracy after the same
fine-tuning (`--sst2-examples` x `--sst2-epochs`).

Prints a table and writes JSON (default `benchmarks/results/albert.json`).

    .venv/bin/python benchmarks/albert.py              # 4 x 4 minutes of pretraining, about 25 minutes
    .venv/bin/python benchmarks/albert.py --quick      # a couple of minutes
"""

import argparse
import os
import platform
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import kbert  # noqa: E402  (before keras: it sets TensorFlow's switches)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from pretraining import fine_tune_sst2, split_corpus, write_results  # noqa: E402

from kbert.models.presets import PRESETS  # noqa: E402

# The ALBERT options on top of a BERT preset's depth and width.
ALBERT_OPTIONS = {"embedding_size": 128, "num_groups": 1, "activation": "gelu_approximate"}
PAIR_LABELS = {"nsp": "IsNext / NotNext", "sop": "in order / swapped"}


def build_encoder(architecture, preset, vocabulary_size, seed):
    keras.utils.set_random_seed(seed)
    options = ALBERT_OPTIONS if architecture == "albert" else {}
    if architecture == "albert" and PRESETS[preset]["hidden_dim"] <= ALBERT_OPTIONS["embedding_size"]:
        options = {**options, "embedding_size": PRESETS[preset]["hidden_dim"] // 2}
    return kbert.Encoder.from_preset(preset, vocabulary_size=vocabulary_size, **options)


class _BatchClock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())


def steps_per_second(pretrainer, data, steps):
    """`fit`'s training steps per second on a throwaway copy, after its first steps (tracing)."""
    probe = kbert.Pretrainer(kbert.Encoder.from_config(pretrainer.encoder.get_config()),
                             objective=pretrainer.objective)
    clock = _BatchClock()
    probe.fit(data, epochs=1, steps_per_epoch=steps + 5, verbose=0, callbacks=[clock])
    return steps / (clock.times[-1] - clock.times[4])


class _StopAfter(keras.callbacks.Callback):
    """Ends training when the wall-clock budget is spent, should the measured speed not hold."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if time.perf_counter() - self.start > self.seconds:
            self.model.stop_training = True


def pair_accuracy(pretrainer, data, labels_key):
    """Accuracy of the model's pair head (`nsp` or `sop`) on pairs labelled for `labels_key`.

    Label 0 is IsNext for NSP pairs and "in order" for SOP pairs, so either
    head reads either kind of pair: class 0 means "B follows A".
    """
    head = pretrainer.objective
    correct = total = 0
    for x, y, _ in data:
        logits = pretrainer.predict_on_batch(x)[head]
        correct += int(np.sum(np.argmax(logits, -1) == np.asarray(y[labels_key])))
        total += len(logits)
    return correct / total


def masked_lm_accuracy(pretrainer, data):
    """Share of the real masked positions whose token the model predicts (any objective's model)."""
    correct = total = 0.0
    for x, y, weights in data:
        predicted = np.argmax(pretrainer.predict_on_batch(x)["mlm"], -1)
        real = np.asarray(weights["mlm"])
        correct += float(np.sum((predicted == np.asarray(y["mlm"])) * real))
        total += float(np.sum(real))
    return correct / total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny budgets, for a smoke run")
    parser.add_argument("--preset", default="mini", help="depth and width of every encoder")
    parser.add_argument("--minutes", type=float, default=4.0, help="pretraining budget of every row")
    parser.add_argument("--vocabulary-size", type=int, default=8192)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="peak pretraining rate")
    parser.add_argument("--max-ngram", type=int, default=1,
                        help="masked spans of up to this many words (ALBERT: 3) for every row")
    parser.add_argument("--sst2-examples", type=int, default=4000)
    parser.add_argument("--sst2-epochs", type=int, default=3)
    parser.add_argument("--sst2-sequence-length", type=int, default=64)
    parser.add_argument("--fine-tune-learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "albert.json"))
    args = parser.parse_args()
    if args.quick:
        args.preset, args.minutes, args.vocabulary_size = "tiny", 0.2, 2000
        args.sst2_examples, args.sst2_epochs = 500, 1

    results = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "rows": []}
    total_start = time.time()
    with tempfile.TemporaryDirectory() as folder:
        train_files, held_out_files = split_corpus(folder)
        vocabulary = kbert.learn_vocabulary(files=[train_files], vocabulary_size=args.vocabulary_size,
                                            verbose=False)
        options = dict(vocabulary=vocabulary, batch_size=args.batch_size, seed=args.seed,
                       sequence_length=args.sequence_length, max_ngram=args.max_ngram, verbose=False)
        held_out = {
            objective: kbert.pretraining_dataset([held_out_files], objective=objective, shuffle_buffer=0,
                                                 **options)
            for objective in ("nsp", "sop")
        }
        # Every chosen token [MASK]ed: the accuracy that needs the context.
        held_out_masked = kbert.pretraining_dataset([held_out_files], objective="none", shuffle_buffer=0,
                                                    mask_token_rate=1.0, random_token_rate=0.0, **options)
        held_out_plain = kbert.pretraining_dataset([held_out_files], objective="none", shuffle_buffer=0,
                                                   **options)
        for architecture in ("bert", "albert"):
            for objective in ("nsp", "sop"):
                label = f"{architecture}-{args.preset} {objective.upper()}"
                train = kbert.pretraining_dataset([train_files], objective=objective, **options)
                encoder = build_encoder(architecture, args.preset, len(vocabulary), args.seed)
                pretrainer = kbert.Pretrainer(encoder, objective=objective)
                pretrainer.compile(learning_rate=args.learning_rate)
                speed = steps_per_second(pretrainer, train, steps=10 if args.quick else 40)
                steps = max(1, int(speed * args.minutes * 60))
                epochs = max(1, -(-steps // int(train.cardinality())))
                print(f"{label}: {speed:.2f} steps/s, {steps} steps in {epochs} epoch(s)", flush=True)
                start = time.time()
                pretrainer.fit(train, epochs=epochs, steps_per_epoch=-(-steps // epochs), verbose=0,
                               callbacks=[_StopAfter(args.minutes * 60 * 1.1)])
                seconds = time.time() - start
                scores = {
                    "mlm_accuracy": masked_lm_accuracy(pretrainer, held_out_plain),
                    "masked_only_mlm_accuracy": masked_lm_accuracy(pretrainer, held_out_masked),
                    "nsp_pairs_accuracy": pair_accuracy(pretrainer, held_out["nsp"], "nsp"),
                    "sop_pairs_accuracy": pair_accuracy(pretrainer, held_out["sop"], "sop"),
                }
                encoder_copy = kbert.Encoder.from_config(pretrainer.encoder.get_config())
                encoder_copy.set_weights(pretrainer.encoder.get_weights())
                row = {
                    "row": label, "architecture": architecture, "objective": objective,
                    "parameters": encoder.count_params(), "steps": int(pretrainer.optimizer.iterations),
                    "pretraining_minutes": seconds / 60, "steps_per_second": int(pretrainer.optimizer.iterations) / seconds,
                    **{name: float(value) for name, value in scores.items()},
                    "sst2_dev_accuracy": fine_tune_sst2(encoder_copy, vocabulary, args, label)["dev_accuracy"],
                }
                print(row, flush=True)
                results["rows"].append(row)
                write_results(args.out, results)  # kept even if a later row fails
                keras.backend.clear_session()
        results["held_out_pairs"] = {name: data.kbert_num_examples for name, data in held_out.items()}
    results["total_seconds"] = time.time() - total_start

    print()
    print(f"Every row: {args.minutes:g} min of pretraining ({args.sequence_length} tokens, batch "
          f"{args.batch_size}), SST-2 {args.sst2_examples} examples x {args.sst2_epochs} epochs")
    print("| model | objective | parameters | steps/s | steps | MLM acc. | MLM acc. (all [MASK]) | "
          "NSP pairs acc. | SOP pairs acc. | SST-2 dev |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in results["rows"]:
        print(f"| {row['architecture']}-{args.preset} | {row['objective'].upper()} | {row['parameters']:,} | "
              f"{row['steps_per_second']:.2f} | {row['steps']} | {row['mlm_accuracy']:.4f} | "
              f"{row['masked_only_mlm_accuracy']:.4f} | {row['nsp_pairs_accuracy']:.4f} | "
              f"{row['sop_pairs_accuracy']:.4f} | {row['sst2_dev_accuracy']:.4f} |")
    print(f"Total wall time {results['total_seconds'] / 60:.1f} min")
    results["complete"] = True
    write_results(args.out, results)
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()
