"""Does pretraining help? BERT's core claim, measured at laptop scale.

1. Learns a WordPiece vocabulary on the raw text in the data folder
   (WikiText-2 valid and test, two Gutenberg books, Tiny Shakespeare), each
   file's last 5 % of lines held out.
2. Measures the pretraining input pipeline alone (examples/s).
3. Pretrains BERT-mini (MLM + NSP) for a fixed number of steps (2,000
   batches of 32 x 64 tokens, peak learning rate 1e-3: about 20 minutes on
   2 idle cores) and reports masked-LM and next-sentence accuracy on the
   held-out text, also with every chosen token [MASK]ed (the accuracy that
   needs the context). 64 tokens, not 128: in a budget of minutes, more steps
   on shorter sequences teach more (the paper, too, pretrained most steps
   on sequences shorter than its longest), and SST-2 sentences fit.
   `--sequence-length` and `--long-steps-fraction` split the steps as the
   paper did (there 90 % at 128 tokens, then 10 % at 512): short sequences
   first, the rest at `--long-sequence-length`, each phase with its own
   warm-up and decay; the held-out text is scored at the long length.
4. Fine-tunes on SST-2 twice with the same steps and hyper-parameters: from
   the pretrained encoder, and from random initialisation; prints both dev
   accuracies.

Prints a table and writes JSON (default `benchmarks/results/pretraining.json`).

    .venv/bin/python benchmarks/pretraining.py              # about 35 minutes here
    .venv/bin/python benchmarks/pretraining.py --quick      # a couple of minutes
"""

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import kbert  # noqa: E402  (before keras: it sets TensorFlow's switches)
import keras  # noqa: E402
import numpy as np  # noqa: E402

from kbert.data.paths import data_dir  # noqa: E402
from kbert.io.atomic_files import write_atomically  # noqa: E402

CORPUS = [
    "wikitext-2-raw/wiki.valid.raw",
    "wikitext-2-raw/wiki.test.raw",
    "gutenberg/pg11.txt",
    "gutenberg/pg1342.txt",
    "tiny_shakespeare/input.txt",
]
HELD_OUT_FRACTION = 0.05


def split_corpus(folder):
    """Copies each corpus file's first 95 % of lines to train/, the rest to held_out/.

    The copies live in a temporary folder for the run only.
    """
    train, held_out = Path(folder) / "train", Path(folder) / "held_out"
    train.mkdir()
    held_out.mkdir()
    for relative in CORPUS:
        lines = (data_dir() / relative).read_text(encoding="utf-8").splitlines(keepends=True)
        cut = int(len(lines) * (1 - HELD_OUT_FRACTION))
        name = relative.replace("/", "_")
        (train / name).write_text("".join(lines[:cut]), encoding="utf-8")
        (held_out / name).write_text("".join(lines[cut:]), encoding="utf-8")
    return str(train / "*"), str(held_out / "*")


def pipeline_speed(data, max_batches):
    start, examples = time.time(), 0
    for batch, (x, _, _) in enumerate(data):
        examples += int(x["token_ids"].shape[0])
        if batch + 1 >= max_batches:
            break
    return examples / (time.time() - start)


def fine_tune_sst2(encoder, vocabulary, args, label):
    train_texts, train_labels = kbert.data.load_glue("sst2", "train")
    dev_texts, dev_labels = kbert.data.load_glue("sst2", "dev")
    order = np.random.default_rng(0).permutation(len(train_texts))[: args.sst2_examples]
    train_texts, train_labels = np.asarray(train_texts, object)[order], np.asarray(train_labels)[order]
    keras.utils.set_random_seed(1)
    clf = kbert.classifier(encoder, num_classes=2, vocabulary=vocabulary,
                           sequence_length=args.sst2_sequence_length)
    clf.compile(learning_rate=args.fine_tune_learning_rate)
    start = time.time()
    clf.fit(train_texts, train_labels, epochs=args.sst2_epochs, batch_size=32, verbose=2)
    seconds = time.time() - start
    accuracy = float(np.mean(clf.predict(dev_texts, verbose=0).argmax(-1) == np.asarray(dev_labels)))
    print(f"SST-2 dev accuracy, {label}: {accuracy:.4f} ({seconds:.0f} s)", flush=True)
    return {"dev_accuracy": accuracy, "seconds": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny budgets, for a smoke run")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--vocabulary-size", type=int, default=8192)
    parser.add_argument("--sequence-length", type=int, default=64,
                        help="packed length of the first (1 - long-steps-fraction) of the steps")
    parser.add_argument("--long-sequence-length", type=int, default=64,
                        help="packed length of the last steps and of the held-out scores")
    parser.add_argument("--long-steps-fraction", type=float, default=0.0,
                        help="share of the steps on long sequences (the paper: 0.1 at 512 after 128)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    # A short budget wants a high peak rate: after 80 steps the masked-LM loss
    # was 7.17 at 3e-4 (the Pretrainer's default for mini), 6.57 at 1e-3.
    parser.add_argument("--learning-rate", type=float, default=1e-3,
                        help="peak pretraining rate (0: the Pretrainer's default for the preset)")
    parser.add_argument("--sst2-examples", type=int, default=4000)
    parser.add_argument("--sst2-epochs", type=int, default=3)
    parser.add_argument("--sst2-sequence-length", type=int, default=64)
    parser.add_argument("--fine-tune-learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "pretraining.json"))
    args = parser.parse_args()
    if args.quick:
        args.preset, args.vocabulary_size, args.pretrain_steps = "tiny", 2000, 20
        args.sst2_examples, args.sst2_epochs = 1000, 1

    results = {"settings": vars(args), "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count()}
    total_start = time.time()
    with tempfile.TemporaryDirectory() as folder:
        train_files, held_out_files = split_corpus(folder)

        start = time.time()
        vocabulary = kbert.learn_vocabulary(files=[train_files], vocabulary_size=args.vocabulary_size,
                                            verbose=False)
        results["vocabulary"] = {"size": len(vocabulary), "seconds": time.time() - start}
        print(f"Vocabulary: {len(vocabulary)} tokens in {time.time() - start:.0f} s", flush=True)

        options = dict(vocabulary=vocabulary, batch_size=args.batch_size, seed=args.seed)
        long_steps = round(args.pretrain_steps * args.long_steps_fraction)
        phases = [(args.sequence_length, args.pretrain_steps - long_steps),
                  (args.long_sequence_length, long_steps)]
        phases = [(length, steps) for length, steps in phases if steps > 0]
        trains = [kbert.pretraining_dataset([train_files], sequence_length=length, **options)
                  for length, _ in phases]
        long_options = dict(sequence_length=args.long_sequence_length, shuffle_buffer=0, **options)
        held_out = kbert.pretraining_dataset([held_out_files], **long_options)
        # Every chosen token [MASK]ed: the accuracy that needs the context
        # (the default 10 % left unchanged are also scored and only need copying).
        held_out_masked = kbert.pretraining_dataset([held_out_files], mask_token_rate=1.0,
                                                    random_token_rate=0.0, verbose=False, **long_options)
        results["corpus"] = {"train_examples": [train.kbert_num_examples for train in trains],
                             "held_out_examples": held_out.kbert_num_examples}
        results["pipeline_examples_per_second"] = pipeline_speed(trains[0], 100)
        print(f"Pipeline: {results['pipeline_examples_per_second']:.0f} examples/s", flush=True)

        keras.utils.set_random_seed(args.seed)
        encoder = kbert.Encoder.from_preset(args.preset, vocabulary_size=len(vocabulary))
        pretrainer = kbert.Pretrainer(encoder)
        pretrainer.compile(learning_rate=args.learning_rate or None)
        start = time.time()
        for train, (length, steps) in zip(trains, phases):
            # Epochs of at most one pass; each phase's learning rate warms up
            # and decays over its steps (a fresh window per `fit` call).
            epochs = max(1, -(-steps // int(train.cardinality())))
            steps_per_epoch = -(-steps // epochs)
            print(f"Pretraining {args.preset} on {length} tokens: {epochs} epoch(s) of {steps_per_epoch} steps",
                  flush=True)
            history = pretrainer.fit(train, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=2)
        pretrain_seconds = time.time() - start
        held_out_scores = pretrainer.evaluate(held_out, return_dict=True, verbose=0)
        held_out_scores["masked_only_mlm_accuracy"] = pretrainer.evaluate(
            held_out_masked, return_dict=True, verbose=0)["mlm_accuracy"]
        results["pretraining"] = {
            "seconds": pretrain_seconds,
            "steps": int(pretrainer.optimizer.iterations.numpy()),
            "train_last_epoch": {k: float(v[-1]) for k, v in history.history.items()},
            "held_out": {k: float(v) for k, v in held_out_scores.items()},
        }
        print(f"Held-out MLM accuracy {held_out_scores['mlm_accuracy']:.4f} "
              f"(all [MASK]: {held_out_scores['masked_only_mlm_accuracy']:.4f}), "
              f"NSP accuracy {held_out_scores['nsp_accuracy']:.4f}", flush=True)
        write_results(args.out, results)  # kept even if a later stage fails
        fill = kbert.fill_mask(pretrainer, vocabulary=vocabulary, top_k=3)
        results["fill_mask_examples"] = {
            text: [[c["token"] for c in mask] for mask in fill(text)]
            for text in ["the king [MASK] the crown .", "she opened the [MASK] and went out ."]
        }

        encoder_copy = kbert.Encoder.from_config(pretrainer.encoder.get_config())
        encoder_copy.set_weights(pretrainer.encoder.get_weights())
        results["sst2_pretrained"] = fine_tune_sst2(encoder_copy, vocabulary, args, "pretrained")
        write_results(args.out, results)
        keras.utils.set_random_seed(args.seed)
        fresh = kbert.Encoder.from_preset(args.preset, vocabulary_size=len(vocabulary))
        results["sst2_random_init"] = fine_tune_sst2(fresh, vocabulary, args, "random init")
    results["total_seconds"] = time.time() - total_start

    print()
    lengths = " then ".join(str(length) for length, _ in phases)
    print(f"| measure ({args.preset}, {lengths} tokens, batch {args.batch_size}) | value |")
    print("| --- | --- |")
    print(f"| pipeline examples/s | {results['pipeline_examples_per_second']:.0f} |")
    p = results["pretraining"]
    print(f"| pretraining steps / minutes | {p['steps']} / {p['seconds'] / 60:.1f} |")
    print(f"| held-out MLM accuracy | {p['held_out']['mlm_accuracy']:.4f} |")
    print(f"| held-out MLM accuracy, every chosen token [MASK] | {p['held_out']['masked_only_mlm_accuracy']:.4f} |")
    print(f"| held-out NSP accuracy | {p['held_out']['nsp_accuracy']:.4f} |")
    print(f"| SST-2 dev accuracy, pretrained | {results['sst2_pretrained']['dev_accuracy']:.4f} |")
    print(f"| SST-2 dev accuracy, random init | {results['sst2_random_init']['dev_accuracy']:.4f} |")
    print(f"| total wall time (min) | {results['total_seconds'] / 60:.1f} |")
    results["complete"] = True
    write_results(args.out, results)
    print(f"Wrote {args.out}")


def write_results(path, results):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"complete": False, **results}, indent=2) + "\n"
    write_atomically(str(path), lambda temporary: Path(temporary).write_text(text))


if __name__ == "__main__":
    main()
