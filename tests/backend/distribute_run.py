"""One worker of the multi-worker tests, in a process of its own (TF_CONFIG set by the test).

    python distribute_run.py JOBS --corpus DIR --logdir DIR --out FILE.npz [--kill-at-step N]

`JOBS` is a comma-separated list, run in order in the same process:

- `pretrain`: a tiny pretrainer on the text corpus in `--corpus`, two
  epochs, with the standard callbacks under `--logdir/pretrain`; weights to
  `--out` under `pretrain_*`, steps and history to the `.json` next to it.
  With `--kill-at-step N`, the process kills itself with SIGKILL right after
  optimizer step N.
- `classify`: a tiny classifier fine-tuned on in-memory texts, in the same
  order on every run; weights under `classify_*`.
- `batches`: the examples this worker trains on in one epoch, as `fit`
  feeds them: of a pretraining run on the prepared TFRecords in
  `--corpus/prepared` (`prepared_*`, each example's original token ids) and
  of a classifier on in-memory texts, shuffled (`texts_*`, each example's
  number).
- `keras-fit`: plain `keras.Model.fit` of a one-layer model (what kbert works
  around); writes `keras_fit` = 1 when it trained.

Without TF_CONFIG the same jobs run in one process: the reference.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pretraining"))
from pretraining_run import VOCABULARY, kill_at_step  # noqa: E402

GLOBAL_BATCH = 12
TEXTS = [f"{a} {b} film {c}" for a in ("a", "the") for b in ("good", "bad", "free") for c in ("now", "soon", "!")]
LABELS = [int("good" in text or "free" in text) for text in TEXTS]


def tiny_encoder(dropout=0.0):
    import kbert

    return kbert.Encoder(vocabulary_size=len(VOCABULARY), num_layers=2, hidden_dim=16, num_heads=2,
                         intermediate_dim=32, max_sequence_length=32, dropout=dropout)


def pretrain(args, strategy, results, summary):
    import keras

    import kbert

    data = kbert.pretraining_dataset(
        [os.path.join(args.corpus, "*.txt")], vocabulary=VOCABULARY, sequence_length=32,
        batch_size=GLOBAL_BATCH, seed=0, short_sequence_rate=0.0, verbose=False,
    )
    with strategy.scope():
        keras.utils.set_random_seed(0)
        pretrainer = kbert.Pretrainer(tiny_encoder(args.dropout))
        pretrainer.compile(learning_rate=1e-3)
    callbacks = kbert.callbacks.standard(os.path.join(args.logdir, "pretrain"), save_freq=3)
    if args.kill_at_step:
        callbacks.append(kill_at_step(args.kill_at_step))
    history = pretrainer.fit(data, epochs=2, callbacks=callbacks, verbose=0)
    results.update({f"pretrain_{i}": w for i, w in enumerate(pretrainer.get_weights())})
    summary["pretrain_steps"] = int(pretrainer.optimizer.iterations.numpy())
    summary["pretrain_history"] = history.history
    summary["batches_per_epoch"] = int(data.cardinality())


def classify(args, strategy, results, summary):
    import keras

    import kbert

    with strategy.scope():
        keras.utils.set_random_seed(0)
        preprocessor = kbert.TextPacker(kbert.Tokenizer(VOCABULARY), sequence_length=16)
        classifier = kbert.Classifier(tiny_encoder(), preprocessor=preprocessor, num_classes=2, dropout=0.0)
        classifier.compile(learning_rate=1e-3)
    history = classifier.fit(TEXTS, LABELS, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False,
                             validation_data=(TEXTS, LABELS), verbose=0)
    results.update({f"classify_{i}": w for i, w in enumerate(classifier.get_weights())})
    summary["classify_history"] = history.history


def batches(args, strategy, results, summary):
    """The examples each worker's replicas get in one epoch, as `fit` gives them."""
    import numpy as np

    import kbert
    from kbert.backend.distribute import distributed_stream
    from kbert.pretraining.pretrainer import _batch_stream

    local = strategy.experimental_local_results
    data = kbert.pretraining_dataset(os.path.join(args.corpus, "prepared"), batch_size=GLOBAL_BATCH,
                                     seed=0, verbose=False)
    stream, steps = _batch_stream(data, None)
    iterator = iter(distributed_stream(strategy, stream, 0))
    examples = []
    for _ in range(steps):
        x, y, weights = next(iterator)
        for token_ids, positions, ids, mask in zip(local(x["token_ids"]), local(x["mask_positions"]),
                                                   local(y["mlm"]), local(weights["mlm"])):
            token_ids = token_ids.numpy().copy()
            for row in range(token_ids.shape[0]):
                real = mask[row].numpy() > 0
                token_ids[row, positions[row].numpy()[real]] = ids[row].numpy()[real]
            examples.extend(token_ids.tolist())
    width = max(len(e) for e in examples)
    results["prepared_examples"] = np.array([e + [0] * (width - len(e)) for e in examples])

    with strategy.scope():
        preprocessor = kbert.TextPacker(kbert.Tokenizer(VOCABULARY), sequence_length=16)
        # As many classes as examples: the labels are the examples' numbers.
        classifier = kbert.Classifier(tiny_encoder(), preprocessor=preprocessor, num_classes=len(TEXTS))
    numbers = list(range(len(TEXTS)))
    dataset = classifier.training_dataset(TEXTS, numbers, batch_size=GLOBAL_BATCH, shuffle=True)
    seen = []
    for _, labels in strategy.experimental_distribute_dataset(dataset):
        for part in local(labels):
            seen.extend(part.numpy().tolist())
    results["texts_examples"] = np.array(seen)
    summary["replicas"] = strategy.num_replicas_in_sync


def keras_fit(args, strategy, results, summary):
    import keras
    import numpy as np

    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", loss="mse")
    try:
        model.fit(np.ones((8, 3)), np.ones(8), batch_size=4, verbose=0)
        summary["keras_fit"] = "trained"
    except Exception as error:  # noqa: BLE001 - what failed is the result
        summary["keras_fit"] = f"{type(error).__name__}: {error}"[:300]


JOBS = {"pretrain": pretrain, "classify": classify, "batches": batches, "keras-fit": keras_fit}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs")
    parser.add_argument("--corpus")
    parser.add_argument("--logdir", default=".")
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--dropout", type=float, default=0.0)
    args = parser.parse_args()

    import numpy as np

    from kbert.backend.distribute import make_strategy

    strategy = make_strategy(None, connect_timeout=60)
    results, summary = {}, {"replicas": strategy.num_replicas_in_sync}
    for job in args.jobs.split(","):
        JOBS[job](args, strategy, results, summary)
    np.savez(args.out, **results)
    with open(args.out.replace(".npz", ".json"), "w") as file:
        json.dump(summary, file)


if __name__ == "__main__":
    main()
