"""How much of a fine-tuning batch is padding, as kbert batches it today, and what packing or unpadding would save.

For each data set, the training split goes through what `kbert train` fits
on: the task's preprocessor (bert-base-uncased's WordPiece vocabulary, the
recipe's sequence length) and `kbert.preprocessing.input_pipeline.
task_dataset` with shuffling (batches of 32; examples grouped by length
within 50 batches, each batch cut to its longest example). From each
batch's padding mask come its examples' real lengths; the tokens a step
computes are then counted five ways:

- `fixed width`: every batch padded to the sequence length (what a
  preprocessor that always pads, such as keras-hub's, gives);
- `kbert, TensorFlow / PyTorch`: each batch cut to its longest example,
  rounded up to a multiple of 8 (the batches as they come);
- `kbert, JAX`: the same batches, rounded up to a power of two (XLA
  compiles each width);
- `longest, unrounded`: the same batches cut to their longest example
  exactly (what the rounding to 8 costs);
- `packed`: the examples packed into rows of the sequence length (best
  fit, longest first), each row a batch row with the padding left over;
- `unpadded`: the real tokens only (a variable-length kernel, as
  ModernBERT's unpadding).

kbert's batches are counted from their real lengths, so the JAX and
unrounded ways are exact for the same batches. The table gives each way's padding share and its tokens relative to
kbert's TensorFlow batches (the linear layers' work, which dominates at
these lengths; attention's grows with the square of a row's width). Writes
`benchmarks/results/padding.json`. Runs on the CPU, offline.

    .venv/bin/python benchmarks/padding.py
    .venv/bin/python benchmarks/padding.py --tasks sst2 --max-examples 2000   # a quick look
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.timing import cpu_model, write_json  # noqa: E402 (after the path is set)

TASKS = ("sst2", "mrpc", "squad")
BATCH_SIZE = 32
WAYS = ("fixed width", "kbert, TensorFlow / PyTorch", "kbert, JAX", "longest, unrounded", "packed", "unpadded")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--max-examples", type=int, help="a seeded subset of each training split")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "padding.json")
    args = parser.parse_args()

    import kbert
    from kbert.preprocessing.input_pipeline import task_dataset
    from kbert.runs.fine_tuning import build_task_model, load_split, sample_examples
    from kbert.runs.recipes import recipe

    _, tokenizer = kbert.load_pretrained("all-minilm-l6-v2")  # bert-base-uncased's vocabulary
    report = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
              "cpu": cpu_model(), "batch_size": BATCH_SIZE, "rows": []}
    for task in args.tasks:
        name, info = recipe(task)
        model = build_task_model(name, "tiny", tokenizer)
        x, y = sample_examples(*load_split(name, info.splits[0]), args.max_examples, seed=0)
        batches = task_dataset(model.preprocessor, x, y, batch_size=BATCH_SIZE, shuffle=True, seed=0)
        lengths = []  # the real lengths of each batch's rows
        for features, *_ in batches:
            lengths.append(features["padding_mask"].numpy().sum(axis=-1).tolist())
        row = {"task": name, "examples": len(y) if y is not None else len(x), "rows": sum(map(len, lengths)),
               "batches": len(lengths),
               "sequence_length": info.sequence_length,
               "tokens": tokens(lengths, info.sequence_length)}
        real = row["tokens"]["unpadded"]
        row["padding_share"] = {way: 1 - real / count for way, count in row["tokens"].items()}
        row["relative_to_kbert"] = {way: count / row["tokens"][WAYS[1]] for way, count in row["tokens"].items()}
        report["rows"].append(row)
        write_json(args.out, report)
        print(f"{name}: {row['rows']:,} rows in {row['batches']:,} batches", flush=True)
    print()
    print(table(report))
    print(f"\n{report['cpu']}, {report['date']}; written to {args.out}")
    return 0


def tokens(batch_lengths, sequence_length):
    """`{way: tokens computed}` for the batches' real row lengths (see the module)."""
    every = [length for batch in batch_lengths for length in batch]
    return {
        WAYS[0]: len(every) * sequence_length,
        WAYS[1]: sum(len(batch) * -(-max(batch) // 8) * 8 for batch in batch_lengths),
        WAYS[2]: sum(len(batch) * min(power_of_two(max(batch)), sequence_length) for batch in batch_lengths),
        WAYS[3]: sum(len(batch) * max(batch) for batch in batch_lengths),
        WAYS[4]: packed_rows(every, sequence_length) * sequence_length,
        WAYS[5]: sum(every),
    }


def power_of_two(length):
    """The width JAX's batches take: the next power of two, at least 8."""
    return max(8, 2 ** math.ceil(math.log2(length)))


def packed_rows(lengths, width):
    """Rows of `width` that best-fit packing, longest first, needs for `lengths`.

    Each example goes to the row with the least room that still holds it,
    else to a new row; rows are counted by the room they have left.
    """
    rows_with_room = [0] * (width + 1)
    rows = 0
    for length in sorted(lengths, reverse=True):
        room = next((room for room in range(length, width + 1) if rows_with_room[room]), None)
        if room is None:
            rows += 1
            room = width
        else:
            rows_with_room[room] -= 1
        rows_with_room[room - length] += 1
    return rows


def table(report):
    lines = ["| task | rows | length | " + " | ".join(WAYS) + " |", "|---|---:|---:|" + "---:|" * len(WAYS)]
    for row in report["rows"]:
        cells = [f"{row['padding_share'][way]:.1%} pad, {row['relative_to_kbert'][way]:.2f}x" for way in WAYS]
        lines.append(f"| {row['task']} | {row['rows']:,} | {row['sequence_length']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("KBERT_DATA", str(ROOT.parent / "shared" / "data"))
    sys.exit(main())
