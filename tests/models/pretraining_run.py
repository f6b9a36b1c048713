"""A small pretraining run in a process of its own, for the resume and multi-device tests.

    python pretraining_run.py --corpus DIR --logdir DIR --out FILE.npz [--kill-at-step N] [--devices 2]

Writes the final weights to `--out` and the `fit` history next to it
(`.json`). With `--kill-at-step N` the process kills itself with SIGKILL
right after optimizer step N, as a crash or a preemption would.
"""

import argparse
import json
import os
import signal

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at-step", type=int)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
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
        # No dropout: its random state is not part of a backup, and the runs
        # compared here must compute the same function.
        encoder = kbert.Encoder(
            vocabulary_size=len(VOCABULARY), num_layers=2, hidden_dim=16, num_heads=2,
            intermediate_dim=32, max_sequence_length=32, dropout=0.0,
        )
        pretrainer = kbert.Pretrainer(encoder)
        pretrainer.compile(learning_rate=1e-3)

    class KillAtStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(pretrainer.optimizer.iterations.numpy()) == args.kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)

    class RecordBatches(keras.callbacks.Callback):
        """Keras' batch logs: running means over the epoch so far."""

        batches = []

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append({name: float(value) for name, value in logs.items()})

    callbacks = kbert.callbacks.standard(args.logdir, save_freq=3, checkpoint=None)
    callbacks.append(RecordBatches())
    if args.kill_at_step:
        callbacks.append(KillAtStep())
    history = pretrainer.fit(data, epochs=args.epochs, callbacks=callbacks, verbose=0)
    np.savez(args.out, *pretrainer.get_weights())
    with open(args.out.replace(".npz", ".json"), "w") as file:
        json.dump(
            {
                "history": history.history,
                "batches": RecordBatches.batches,
                "steps": int(pretrainer.optimizer.iterations.numpy()),
                "batches_per_epoch": int(data.cardinality()),
                "replicas": strategy.num_replicas_in_sync,
            },
            file,
        )


if __name__ == "__main__":
    main()
