"""Checkpoint quality: all-MiniLM-L6-v2 fine-tuned with kbert on every task, beside published numbers.

Fine-tunes the published all-MiniLM-L6-v2 weights (`--encoder` to change)
on each task's whole training split (budgets below) and scores the task's
evaluation split the way its community does: SST-2, RTE and MRPC on GLUE
dev, SMS Spam on a fixed 80/20 split (spam F1), SICK on its TEST split,
CoNLL-2003 on testb (entity F1) and SQuAD v1.1 on dev articles 38-47 after
training on articles 0-37 (only the dev file is available offline). The
table sets each result beside the published MiniLM-L6-H384 dev numbers and
the BERT paper's; the hyper-parameters are printed with it and written to
the JSON.

Then, side by side with a peer: the same SST-2 fine-tuning (a fixed subset,
the same weights, examples, epochs, batch size, learning rate and seed)
with kbert and with Hugging Face transformers on PyTorch
(`benchmarks/peers/hf_classifier.py`, run in `benchmarks/.peer-venv`: make
it with `make peer-venv`), reporting accuracy and training examples/s.

    .venv/bin/python benchmarks/quality.py                  # about 2 hours on 2 cores
    .venv/bin/python benchmarks/quality.py --quick          # minutes: a smoke run
    .venv/bin/python benchmarks/quality.py --tasks rte mrpc --no-peer
    .venv/bin/python benchmarks/quality.py --tasks squad --no-peer --merge   # add to the JSON
    .venv/bin/python benchmarks/quality.py --tasks --merge                     # the side by side only
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, str(Path(__file__).parent))

from tasks import DATA, RECIPES, add_arguments, metric_name, metric_value, run_tasks, write_json  # noqa: E402

# Whole training splits; epochs and sequence lengths sized for about two
# hours on 2 cores. Listed in the order they run.
BUDGETS = {
    "sst2": {"max_examples": None, "epochs": 1, "sequence_length": 64},
    "sms_spam": {"max_examples": None, "epochs": 3, "sequence_length": 64},
    "sick": {"max_examples": None, "epochs": 3, "sequence_length": 64},
    "mrpc": {"max_examples": None, "epochs": 3, "sequence_length": 128},
    "rte": {"max_examples": None, "epochs": 3, "sequence_length": 128},
    "conll2003": {"max_examples": None, "epochs": 2, "sequence_length": 128},
    "squad": {"max_examples": None, "epochs": 1, "sequence_length": 256},
}
# Published numbers, in % (SQuAD: EM / F1). MiniLM-L6-H384: GLUE dev, as
# reported for the distilled MiniLM that all-MiniLM-L6-v2 starts from. BERT:
# Devlin et al. (2019), GLUE test (Table 1), SQuAD v1.1 dev (Table 2),
# CoNLL-2003 test (Table 7).
PUBLISHED = {
    "sst2": {"MiniLM-L6-H384 (dev)": "91.5", "BERT-base (test)": "93.5", "BERT-large (test)": "94.9"},
    "rte": {"MiniLM-L6-H384 (dev)": "68.8", "BERT-base (test)": "66.4", "BERT-large (test)": "70.1"},
    "mrpc": {"MiniLM-L6-H384 (dev)": "88.9", "BERT-base (test)": "88.9", "BERT-large (test)": "89.3"},
    "conll2003": {"BERT-base (test)": "92.4", "BERT-large (test)": "92.8"},
    "squad": {"BERT-base (dev)": "80.8 / 88.5", "BERT-large (dev)": "84.1 / 90.9"},
}
PEER_VENV = Path(__file__).parent / ".peer-venv"
PEER = {"examples": 4000, "epochs": 2, "sequence_length": 64, "eval_examples": None}
PEER_QUICK = {"examples": 64, "epochs": 1, "sequence_length": 64, "eval_examples": 64}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, default_tasks=list(BUDGETS))
    parser.add_argument("--no-peer", action="store_true", help="skip the side-by-side with transformers")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "quality.json"))
    parser.add_argument("--merge", action="store_true",
                        help="keep the results already in --out (tasks and side by side) and add this run's")
    args = parser.parse_args()

    earlier = json.loads(Path(args.out).read_text()) if args.merge and Path(args.out).exists() else None
    results = run_tasks(args, BUDGETS, earlier)
    results["published"] = PUBLISHED
    if not args.no_peer:
        results["side_by_side"] = side_by_side(args)
        write_json(results, args.out)
    print_quality_table(results, args)
    print(f"Wrote {args.out}")


def side_by_side(args):
    """SST-2 on a fixed subset with kbert and with transformers/PyTorch: accuracy and examples/s."""
    import keras

    import kbert
    from kbert.checkpoints.loading import resolve_checkpoint
    from kbert.runs.fine_tuning import load_split, sample_examples

    budget = PEER_QUICK if args.quick else PEER
    (train_x, train_y), (eval_x, eval_y) = (load_split("sst2", "train"), load_split("sst2", "dev"))
    train_x, train_y = sample_examples(train_x, train_y, budget["examples"], args.seed)
    eval_x, eval_y = sample_examples(eval_x, eval_y, budget["eval_examples"], args.seed)

    keras.utils.set_random_seed(args.seed)
    model = kbert.classifier(args.encoder, num_classes=2, sequence_length=budget["sequence_length"])
    if args.learning_rate:
        model.compile(learning_rate=args.learning_rate)
    learning_rate = model.optimizer._learning_rate.peak_learning_rate
    start = time.time()
    model.fit(train_x, train_y, epochs=budget["epochs"], batch_size=args.batch_size, verbose=2)
    seconds = time.time() - start
    accuracy = float((model.predict(eval_x, verbose=0).argmax(-1) == eval_y).mean())
    rows = {"kbert": {"accuracy": accuracy, "train_seconds": seconds,
                      "train_examples_per_second": len(train_y) * budget["epochs"] / seconds}}

    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"No peer environment at {PEER_VENV}: run `make peer-venv` first, or pass --no-peer.")
    with tempfile.TemporaryDirectory() as folder:
        data = os.path.join(folder, "sst2.json")
        Path(data).write_text(json.dumps({
            "num_classes": 2,
            "train": [[t, int(y)] for t, y in zip(train_x, train_y)],
            "eval": [[t, int(y)] for t, y in zip(eval_x, eval_y)],
        }))
        command = [str(python), str(Path(__file__).parent / "peers" / "hf_classifier.py"),
                   "--checkpoint", resolve_checkpoint(args.encoder), "--data", data,
                   "--epochs", str(budget["epochs"]), "--batch-size", str(args.batch_size),
                   "--learning-rate", str(learning_rate), "--sequence-length", str(budget["sequence_length"]),
                   "--seed", str(args.seed)]
        print("== transformers/PyTorch:", " ".join(command[1:]), flush=True)
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    rows["transformers (PyTorch)"] = json.loads(output.strip().splitlines()[-1])
    return {"settings": dict(budget, learning_rate=learning_rate, batch_size=args.batch_size,
                             train_examples=len(train_y), eval_examples=len(eval_y)), "runs": rows}


def percent(task, result):
    """The headline metric in %, as papers report it."""
    return metric_value(task, result) if task == "squad" else f"{100 * result[RECIPES[task].metric]:.1f}"


def print_quality_table(results, args):
    print()
    print(f"Encoder: {args.encoder}" + (" (quick run)" if args.quick else ""))
    print("| task | data | split | metric | kbert (%) | published (%) | epochs | examples | lr | min |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for task, result in results["tasks"].items():
        published = "; ".join(f"{k} {v}" for k, v in PUBLISHED.get(task, {}).items()) or "-"
        settings = result["settings"]
        print(f"| {task} | {DATA[task]} | {result['split']} | {metric_name(task)} | "
              f"{percent(task, result)} | {published} | {settings['epochs']} | "
              f"{result['train_examples']:,} | {settings['learning_rate']:.2g} | "
              f"{result['wall_seconds'] / 60:.1f} |")
    if "side_by_side" in results:
        peer = results["side_by_side"]
        print()
        print(f"SST-2 side by side: {peer['settings']}")
        print("| implementation | dev accuracy | train examples/s | train time (s) |")
        print("| --- | --- | --- | --- |")
        for name, run in peer["runs"].items():
            print(f"| {name} | {run['accuracy']:.4f} | {run['train_examples_per_second']:.1f} | "
                  f"{run['train_seconds']:.0f} |")


if __name__ == "__main__":
    main()
