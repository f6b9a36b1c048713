"""Smaller BERTs from a fine-tuned teacher: distillation and pruning, at a stated CPU budget.

The teacher is all-MiniLM-L6-v2 (6 layers, H384, 12 heads) fine-tuned on
SST-2 (and on SMS Spam, the second task). From it, on the same task data:

- `mini random init`: a BERT-mini (L4 H256 A4) fine-tuned directly from
  random weights: the floor;
- `mini task-distilled`: the same student trained by `kbert.Distiller` on the
  labelled set plus an unlabelled transfer set (SST-2 train sentences outside
  the labelled set, their labels dropped; none for SMS Spam) that the teacher
  labels;
- `tiny task-distilled`: the same with BERT-tiny (L2 H128 A2), the fastest;
- `mini general-distilled, fine-tuned`: the student first learns from the
  pretrained all-MiniLM-L6-v2 *encoder* (before any fine-tuning) on raw text
  (`kbert.LayerwiseDistiller`: embeddings,
  hidden states, attention maps; WikiText-2, two books, Tiny Shakespeare)
  for `--general-minutes`, then gets the same plain fine-tuning as the
  random-init row: does general distillation help at laptop scale?
- `mini general + task-distilled`: that student, then task distillation;
- `3-layer from teacher, distilled`: the teacher's layers 0, 2, 4
  (`Encoder.truncated`, DistilBERT's initialisation), then task distillation;
- `teacher pruned 50 % / 80 %`: the fine-tuned teacher trained further with
  `kbert.MagnitudePruning` to that weight sparsity of its Transformer kernels;
- `teacher, half the heads pruned`: `kbert.prune_heads` removes the least
  important half of the heads (Michel et al.), then a short fine-tuning.

Each row reports the dev accuracy (SST-2) or test F1 of the spam class (SMS
Spam), parameters (non-zero ones for weight pruning), inference
sentences/s on the evaluation texts at their real lengths (`predict`,
batch 32, best of `--speed-runs` after a warm-up), and its budget: training
minutes and examples x epochs.

Prints a table per task and writes JSON (default `benchmarks/results/compression.json`).
Fine-tuned teachers are kept in `--cache` and reused by later runs.

    .venv/bin/python benchmarks/distillation_and_pruning.py            # both tasks, about 90 minutes on 2 cores
    .venv/bin/python benchmarks/distillation_and_pruning.py --quick    # every row on tiny budgets, a few minutes
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import kbert  # noqa: E402  (before keras: it sets TensorFlow's switches)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from albert import _BatchClock, _StopAfter  # noqa: E402
from pretraining import CORPUS, write_results  # noqa: E402

from kbert.data.paths import data_dir  # noqa: E402
from kbert.runs.fine_tuning import load_split  # noqa: E402

TEACHER = "all-minilm-l6-v2"
# The rows, in table order after the teacher's (`--rows`).
ROWS = ("random", "task", "tiny", "general", "truncated", "pruned", "heads")
TASKS = {
    # name: (metric, class names, where the transfer set comes from)
    "sst2": ("accuracy", ["negative", "positive"]),
    "sms_spam": ("f1", ["ham", "spam"]),
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--examples", type=int, default=20000,
                        help="labelled training examples per task (SMS Spam has fewer: all)")
    parser.add_argument("--transfer-examples", type=int, default=20000,
                        help="unlabelled SST-2 train sentences the teacher labels for distillation")
    parser.add_argument("--teacher-epochs", type=int, default=3)
    parser.add_argument("--student-epochs", type=int, default=3)
    parser.add_argument("--distill-epochs", type=int, default=2,
                        help="epochs of task distillation over labelled + transfer examples")
    parser.add_argument("--prune-epochs", type=int, default=1,
                        help="epochs of fine-tuning during and after pruning")
    parser.add_argument("--general-minutes", type=float, default=8.0,
                        help="wall-clock budget of general (layer-wise) distillation")
    parser.add_argument("--student-learning-rate", type=float, default=5e-4,
                        help="peak rate of the mini and tiny students, which start untrained (the "
                             "fine-tuning default of their width, about 1e-4, is for pretrained ones)")
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--speed-runs", type=int, default=3)
    parser.add_argument("--cache", default="benchmarks/.cache/compression",
                        help="fine-tuned teachers are kept here and reused")
    parser.add_argument("--out", default="benchmarks/results/compression.json")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS,
                        help="the rows to run (the teacher's always is)")
    parser.add_argument("--keep-rows-of", default=None,
                        help="a JSON of an earlier run whose rows fill in the rows not run")
    parser.add_argument("--quick", action="store_true", help="every row on tiny budgets")
    args = parser.parse_args()
    if args.quick:
        args.examples, args.transfer_examples = 256, 256
        args.teacher_epochs = args.student_epochs = args.distill_epochs = args.prune_epochs = 1
        args.general_minutes, args.speed_runs = 0.5, 1
        args.cache = os.path.join(args.cache, "quick")
        if args.out == parser.get_default("out"):
            args.out = "benchmarks/results/compression-quick.json"
    return args


def task_data(task, args):
    """`(train_x, train_y, transfer_x, eval_x, eval_y)`: a seeded labelled subset, the unlabelled rest."""
    split = "dev" if task == "sst2" else "test"
    x, y = load_split(task, "train")
    eval_x, eval_y = load_split(task, split)
    order = np.random.default_rng(0).permutation(len(y))
    labelled, rest = order[: args.examples], order[args.examples :]
    transfer = rest[: args.transfer_examples] if task == "sst2" else rest[:0]
    pick = lambda indices: [x[i] for i in indices]  # noqa: E731
    return pick(labelled), [y[i] for i in labelled], pick(transfer), list(eval_x), list(eval_y)


def score(model, task, eval_x, eval_y):
    report = model.evaluate_report(eval_x, eval_y)
    return float(report[TASKS[task][0]])


def sentences_per_second(model, texts, runs):
    model.predict(texts[:64], batch_size=32, verbose=0)  # trace
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        model.predict(texts, batch_size=32, verbose=0)
        best = max(best, len(texts) / (time.perf_counter() - start))
    return best


def parameters(model):
    weights = model.encoder.weights + [w for w in model.weights if not any(w is e for e in model.encoder.weights)]
    total = sum(int(np.prod(w.shape)) for w in weights)
    non_zero = sum(int(np.count_nonzero(keras.ops.convert_to_numpy(w))) for w in weights)
    return total, non_zero


def teacher_model(task, train_x, train_y, args):
    path = Path(args.cache) / f"{task}_teacher_{len(train_y)}x{args.teacher_epochs}.keras"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        print(f"Teacher: {path} (cached)", flush=True)
        return kbert.load_model(str(path)), json.loads(meta.read_text())
    keras.utils.set_random_seed(0)
    teacher = kbert.classifier(TEACHER, num_classes=2, sequence_length=args.sequence_length,
                               class_names=TASKS[task][1])
    start = time.time()
    teacher.fit(train_x, train_y, epochs=args.teacher_epochs, batch_size=args.batch_size, verbose=2)
    budget = {"minutes": (time.time() - start) / 60, "examples": len(train_y), "epochs": args.teacher_epochs}
    path.parent.mkdir(parents=True, exist_ok=True)
    teacher.save(str(path))
    meta.write_text(json.dumps(budget))
    return teacher, budget


def mini_encoder(seed=1, preset="mini"):
    keras.utils.set_random_seed(seed)
    return kbert.Encoder.from_preset(preset, vocabulary_size=30522)


def fine_tune(encoder, teacher, train_x, train_y, args, epochs, learning_rate=None):
    """A classifier on `encoder` with the teacher's preprocessor, fine-tuned on the labelled set alone."""
    model = kbert.Classifier(encoder, preprocessor=keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(teacher.preprocessor)))
    model.compile(learning_rate=learning_rate)
    start = time.time()
    model.fit(train_x, train_y, epochs=epochs, batch_size=args.batch_size, verbose=2)
    return model, (time.time() - start) / 60


def task_distill(teacher, student, train_x, train_y, transfer_x, args, learning_rate=None):
    distiller = kbert.Distiller(teacher, student)
    distiller.compile(learning_rate=learning_rate)
    start = time.time()
    distiller.fit(train_x, train_y, unlabeled=transfer_x or None, epochs=args.distill_epochs,
                  batch_size=args.batch_size, verbose=2)
    return distiller.student, (time.time() - start) / 60


def general_corpus(limit_lines=200_000):
    """Raw lines of the shared text corpus with at least 8 words (headings and blanks dropped)."""
    lines = []
    for relative in CORPUS:
        for line in (data_dir() / relative).read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if len(line.split()) >= 8 and not line.startswith("="):
                lines.append(line)
    return lines[:limit_lines]


def general_distill(teacher, args):
    """A mini student that learned the teacher's encoder on raw text for `--general-minutes`.

    A short probe on a throwaway copy measures the steps per second, so that
    the run's learning-rate schedule (warm-up, decay) spans the budget.
    """
    texts = general_corpus()
    data = tf.data.Dataset.from_tensor_slices(texts).shuffle(len(texts), seed=0).repeat()
    packer = teacher.preprocessor.packer
    # TinyBERT's general distillation learns from the pretrained encoder, before any task.
    pretrained, _ = kbert.load_pretrained(TEACHER)
    probe = kbert.LayerwiseDistiller(pretrained, mini_encoder(seed=2), preprocessor=packer)
    probe.compile()
    clock = _BatchClock()
    probe.fit(data, batch_size=args.batch_size, steps_per_epoch=25, callbacks=[clock], verbose=0)
    steps_per_second = 20 / (clock.times[-1] - clock.times[4])
    steps = max(int(args.general_minutes * 60 * steps_per_second), 10)
    student = mini_encoder(seed=2)
    distiller = kbert.LayerwiseDistiller(pretrained, student, preprocessor=packer)
    distiller.compile()
    start = time.time()
    history = distiller.fit(data, batch_size=args.batch_size, steps_per_epoch=steps, verbose=2,
                            callbacks=[_StopAfter(args.general_minutes * 60 * 1.1)])
    minutes = (time.time() - start) / 60
    final = {key: float(values[-1]) for key, values in history.history.items()}
    return distiller.student, {"minutes": minutes, "steps": steps, "texts": len(texts),
                               "batch_size": args.batch_size, "final_losses": final}


def prune_weights(teacher, sparsity, train_x, train_y, args):
    model = clone(teacher)
    model.compile(learning_rate=2e-5)
    start = time.time()
    model.fit(train_x, train_y, epochs=args.prune_epochs, batch_size=args.batch_size, verbose=2,
              callbacks=[kbert.MagnitudePruning(sparsity)])
    return model, (time.time() - start) / 60


def prune_half_heads(teacher, train_x, train_y, args):
    start = time.time()
    sample_x, sample_y = train_x[:2000], train_y[:2000]
    importance = kbert.compression.head_importance(teacher, sample_x, sample_y)
    model = kbert.prune_heads(teacher, fraction=0.5, importance=importance)
    model.compile(learning_rate=2e-5)
    model.fit(train_x, train_y, epochs=args.prune_epochs, batch_size=args.batch_size, verbose=2)
    return model, (time.time() - start) / 60


def clone(model):
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy


def main():
    args = parse_args()
    results = {"cpu": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d"),
               "settings": {k: v for k, v in vars(args).items() if k not in ("out",)}, "tasks": {}}
    previous = json.loads(Path(args.keep_rows_of).read_text()) if args.keep_rows_of else None
    general = None
    for task in args.tasks:
        train_x, train_y, transfer_x, eval_x, eval_y = task_data(task, args)
        rows = results["tasks"][task] = []

        def record(key, name, model, budget):
            total, non_zero = parameters(model)
            row = {"row": key, "model": name, TASKS[task][0]: score(model, task, eval_x, eval_y),
                   "parameters": total, "non_zero_parameters": non_zero,
                   "sentences_per_second": sentences_per_second(model, eval_x, args.speed_runs),
                   "budget": budget}
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_results(args.out, results)

        def keep_previous(key):
            """Rows of `--keep-rows-of` for a row not run again."""
            old = [] if previous is None else previous["tasks"].get(task, [])
            rows.extend(row for row in old if row.get("row") == key)

        teacher, teacher_budget = teacher_model(task, train_x, train_y, args)
        record("teacher", "teacher (all-MiniLM-L6-v2)", teacher, teacher_budget)
        labelled = {"examples": len(train_y), "epochs": args.student_epochs}
        distilled = {"examples": len(train_y) + len(transfer_x), "epochs": args.distill_epochs}
        for key in ROWS:
            if key not in args.rows:
                keep_previous(key)
                continue
            if key == "random":
                model, minutes = fine_tune(mini_encoder(), teacher, train_x, train_y, args, args.student_epochs,
                                           args.student_learning_rate)
                record(key, "mini random init", model, {"minutes": minutes, **labelled})
            elif key in ("task", "tiny"):
                preset = "mini" if key == "task" else "tiny"
                model, minutes = task_distill(teacher, mini_encoder(preset=preset), train_x, train_y,
                                              transfer_x, args, args.student_learning_rate)
                record(key, f"{preset} task-distilled", model, {"minutes": minutes, **distilled})
            elif key == "general":
                if general is None:
                    # General distillation needs no task: one student serves both tasks.
                    general = general_distill(teacher, args)
                    results["general_distillation"] = general[1]
                for label, run in [("mini general-distilled, fine-tuned", "fine_tune"),
                                   ("mini general + task-distilled", "distill")]:
                    student = kbert.Encoder.from_config(general[0].get_config())
                    student.set_weights(general[0].get_weights())
                    if run == "fine_tune":
                        model, minutes = fine_tune(student, teacher, train_x, train_y, args,
                                                   args.student_epochs, args.student_learning_rate)
                        budget = {"minutes": minutes, **labelled}
                    else:
                        model, minutes = task_distill(teacher, student, train_x, train_y, transfer_x, args,
                                                      args.student_learning_rate)
                        budget = {"minutes": minutes, **distilled}
                    record(key, label, model, {**budget, "general_minutes": general[1]["minutes"]})
            elif key == "truncated":
                # From pretrained layers: the fine-tuning rate of its width.
                model, minutes = task_distill(teacher, teacher.encoder.truncated([0, 2, 4]), train_x,
                                              train_y, transfer_x, args)
                record(key, "3-layer from teacher, distilled", model, {"minutes": minutes, **distilled})
            elif key == "pruned":
                pruning = {"examples": len(train_y), "epochs": args.prune_epochs}
                for sparsity in (0.5, 0.8):
                    model, minutes = prune_weights(teacher, sparsity, train_x, train_y, args)
                    record(key, f"teacher pruned to {sparsity:.0%} weights", model,
                           {"minutes": minutes, **pruning})
            else:
                model, minutes = prune_half_heads(teacher, train_x, train_y, args)
                record(key, "teacher, half the heads pruned", model,
                       {"minutes": minutes, "examples": len(train_y), "epochs": args.prune_epochs})
        print_table(task, rows)
    results["complete"] = True
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"Wrote {args.out}")


def print_table(task, rows):
    metric = TASKS[task][0]
    teacher = rows[0]
    print(f"\n{task}: {metric} on the evaluation split")
    print(f"{'model':<38} {metric:>8} {'% teacher':>9} {'params':>11} {'non-zero':>11} {'sent/s':>8} "
          f"{'x teacher':>9} {'min':>6} {'ex x ep':>12}")
    for row in rows:
        budget = row["budget"]
        share = row[metric] / teacher[metric] if teacher[metric] else float("nan")
        print(f"{row['model']:<38} {row[metric]:8.4f} {share:9.1%} "
              f"{row['parameters']:11,} {row['non_zero_parameters']:11,} "
              f"{row['sentences_per_second']:8.1f} "
              f"{row['sentences_per_second'] / teacher['sentences_per_second']:9.2f} "
              f"{budget['minutes']:6.1f} {budget['examples']:>7,}x{budget['epochs']}")


if __name__ == "__main__":
    main()
