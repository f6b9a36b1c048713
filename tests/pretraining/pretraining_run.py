"""A small pretraining run in a process of its own, for the resume and multi-device tests.

    python pretraining_run.py --corpus DIR --logdir DIR --out FILE.npz [--kill-at-step N] [--devices 2]
        [--dropout 0.1] [--feed stream|repeat|plain] [--steps-per-epoch N]

Writes the final weights to `--out` and the `fit` history next to it
(`.json`). With `--kill-at-step N` the process kills itself with SIGKILL
right after optimizer step N, as a crash or a preemption would.

    python pretraining_run.py cli [--kill-at-step N] pretrain ARGUMENTS...

runs `kbert pretrain ARGUMENTS...` (the command line's own code), killed the
same way at step N.
"""

import argparse
import json
import os
import signal
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

VOCABULARY = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "cat", "dog", "sat", "on", "mat", "good", "bad", "film",
    "free", "prize", "now", "see", "you", "soon", "##s", "##ing", ".", ",", "!", "?",
]  # fmt: skip


def write_corpus(folder, documents=6, sentences=30, seed=0):
    """Files of random sentences from the vocabulary: each file one document."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = VOCABULARY[5:23]
    os.makedirs(folder, exist_ok=True)
    for document in range(documents):
        lines = [" ".join(rng.choice(words, size=rng.integers(4, 12))) + " ." for _ in range(sentences)]
        with open(os.path.join(folder, f"doc{document}.txt"), "w") as file:
            file.write("\n".join(lines) + "\n")


def kill_at_step(step):
    """A callback that kills the process with SIGKILL right after optimizer step `step`."""
    import keras

    class KillAtStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == step:
                os.kill(os.getpid(), signal.SIGKILL)

    return KillAtStep()


def cli_in_this_process(argv):
    """`kbert ARGUMENTS...`, with `--kill-at-step N` taken off the front."""
    import kbert.callbacks
    from kbert import cli

    if argv[:1] == ["--kill-at-step"]:
        step, argv = int(argv[1]), argv[2:]
        standard = kbert.callbacks.standard
        kbert.callbacks.standard = lambda *args, **kwargs: standard(*args, **kwargs) + [kill_at_step(step)]
    sys.exit(cli.main(argv))


def main():
    if sys.argv[1:2] == ["cli"]:
        return cli_in_this_process(sys.argv[2:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--feed", choices=("stream", "repeat", "plain"), default="stream",
                        help="the pretraining dataset itself, `.repeat()`-ed (give "
                             "--steps-per-epoch), or as a plain dataset without kbert's stream")
    parser.add_argument("--steps-per-epoch", type=int)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--full-length", action="store_true",
                        help="no short sequences: every example has the same number of masks")
    args = parser.parse_args()

    import tensorflow as tf

    if args.devices > 1:
        # Logical CPU devices must be made before TensorFlow starts its runtime.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices
        )
    import keras
    import numpy as np

    import kbert

    data = kbert.pretraining_dataset(
        [os.path.join(args.corpus, "*.txt")],
        vocabulary=VOCABULARY,
        sequence_length=32,
        batch_size=args.batch_size,
        seed=0,
        short_sequence_rate=0.0 if args.full_length else 0.1,
        verbose=False,
    )
    if args.devices > 1:
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.devices)])
    else:
        strategy = tf.distribute.get_strategy()
    with strategy.scope():
        keras.utils.set_random_seed(0)
        encoder = kbert.Encoder(
            vocabulary_size=len(VOCABULARY), num_layers=2, hidden_dim=16, num_heads=2,
            intermediate_dim=32, max_sequence_length=32, dropout=args.dropout,
        )
        pretrainer = kbert.Pretrainer(encoder)
        pretrainer.compile(learning_rate=1e-3)

    class RecordBatches(keras.callbacks.Callback):
        """Keras' batch logs: running means over the epoch so far."""

        batches = []

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append({name: float(value) for name, value in logs.items()})

    callbacks = kbert.callbacks.standard(args.logdir, save_freq=3, checkpoint=None)
    callbacks.append(RecordBatches())
    if args.kill_at_step:
        callbacks.append(kill_at_step(args.kill_at_step))
    batches_per_epoch = int(data.cardinality())
    fed = data
    if args.feed == "repeat":
        fed = data.repeat()
    elif args.feed == "plain":
        # What a user's own pipeline looks like: a dataset of known length
        # without kbert's stream.
        fed = data.map(lambda *batch: batch)
    history = pretrainer.fit(fed, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                             callbacks=callbacks, verbose=0)
    np.savez(args.out, *pretrainer.get_weights())
    with open(args.out.replace(".npz", ".json"), "w") as file:
        json.dump(
            {
                "history": history.history,
                "batches": RecordBatches.batches,
                "steps": int(pretrainer.optimizer.iterations.numpy()),
                "batches_per_epoch": args.steps_per_epoch or batches_per_epoch,
                "replicas": strategy.num_replicas_in_sync,
            },
            file,
        )


if __name__ == "__main__":
    main()
