"""Jobs of the cross-backend tests, in a process of its own on the backend the tests name.

    KERAS_BACKEND=jax python run_on_backend.py JOB[,JOB...] FOLDER

The jobs run one after the other in that process (its start-up, seconds,
is paid once). `FOLDER` holds what the tests prepared and gets what the
jobs write:

- `outputs`: every `encoder*.keras` in FOLDER, run on `inputs.npz`; the
  outputs go to `outputs-<backend>.npz` (`<file>/<output>`);
- `train_steps`: two optimizer steps of `classifier.keras` (its compiled
  BertAdamW) on `batch.npz`; the losses and the weights after them go to
  `steps-<backend>.npz`;
- `fine_tune`: a tiny classifier fine-tuned on raw text on this backend
  (the test's `TEXTS` and `LABELS`), saved to `model-<backend>.keras`, its
  probabilities to `predictions-<backend>.npz`, and exported with
  `kbert.export` (through a TensorFlow process) to `export-<backend>/`;
- `without_tensorflow`: with TensorFlow made impossible to import, a tiny
  classifier trains on token ids, saves and loads; what was tried goes to
  `without-tensorflow-<backend>.json`;
- `data_parallel`: a tiny classifier trained on token ids, on one device and
  then under `keras.distribution.DataParallel` over the devices JAX has
  (`XLA_FLAGS=--xla_force_host_platform_device_count=2` on a CPU); the
  losses and the weights' devices go to `data-parallel.json`. It sets
  Keras' distribution for the rest of the process: it goes last.
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys

TEXTS = ["a good film", "a bad film", "the cat sat on the mat", "free prize now !", "good", "bad film now"]
LABELS = [1, 0, 1, 0, 1, 0]
VOCABULARY = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on", "mat", "good", "bad",
    "film", "free", "prize", "now", "see", "you", "soon", "##s", "##ing", ".", ",", "!", "?",
]  # fmt: skip


class _NoTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import hook under which TensorFlow and its libraries are not installed."""

    BLOCKED = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "tf_keras")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.BLOCKED:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

    def exec_module(self, module):
        pass


def token_ids(rows=8, length=10, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    padding_mask = np.ones((rows, length), "int32")
    padding_mask[1::2, length // 2 :] = 0
    return {
        "token_ids": rng.integers(5, len(VOCABULARY), (rows, length)).astype("int32") * padding_mask,
        "segment_ids": np.zeros((rows, length), "int32"),
        "padding_mask": padding_mask,
    }, np.arange(rows) % 2


def tiny_classifier():
    import kbert

    encoder = kbert.Encoder(vocabulary_size=len(VOCABULARY), num_layers=2, hidden_dim=16, num_heads=2,
                            intermediate_dim=32, max_sequence_length=32, dropout=0.0)
    return kbert.Classifier(encoder, num_classes=2, dropout=0.0)


def outputs(folder, backend):
    import keras
    import numpy as np

    import kbert

    inputs = dict(np.load(os.path.join(folder, "inputs.npz")))
    results = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("encoder") and name.endswith(".keras"):
            encoder = kbert.load_model(os.path.join(folder, name))
            for output, value in encoder(inputs).items():
                values = value if isinstance(value, list) else [value]
                for i, tensor in enumerate(values):
                    results[f"{name}/{output}/{i}"] = keras.ops.convert_to_numpy(tensor)
    np.savez(os.path.join(folder, f"outputs-{backend}.npz"), **results)


def train_steps(folder, backend):
    import numpy as np

    import kbert

    model = kbert.load_model(os.path.join(folder, "classifier.keras"))
    batch = dict(np.load(os.path.join(folder, "batch.npz")))
    labels = batch.pop("labels")
    losses = [float(model.train_on_batch(batch, labels)[0]) for _ in range(2)]
    np.savez(os.path.join(folder, f"steps-{backend}.npz"), losses=np.array(losses), **{
        f"weight_{i}": weight for i, weight in enumerate(model.get_weights())
    })


def fine_tune(folder, backend):
    import keras
    import numpy as np

    import kbert

    keras.utils.set_random_seed(0)
    model = kbert.classifier("tiny", num_classes=2, vocabulary=VOCABULARY, sequence_length=16,
                             class_names=["bad", "good"], num_layers=1, hidden_dim=16, num_heads=2,
                             intermediate_dim=32)
    model.compile(learning_rate=3e-3)
    model.fit(TEXTS, LABELS, batch_size=2, epochs=2, verbose=0)
    model.save(os.path.join(folder, f"model-{backend}.keras"))
    np.savez(os.path.join(folder, f"predictions-{backend}.npz"),
             probabilities=model.predict_proba(TEXTS, verbose=0))
    kbert.export(model, os.path.join(folder, f"export-{backend}"))


def without_tensorflow(folder, backend):
    sys.meta_path.insert(0, _NoTensorFlow())
    import keras
    import numpy as np

    import kbert

    report = {"tensorflow_loaded": None}
    x, y = token_ids()
    keras.utils.set_random_seed(0)
    model = tiny_classifier()
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    path = os.path.join(folder, f"without-tensorflow-{backend}.keras")
    model.save(path)
    restored = kbert.load_model(path)
    report["losses"] = [float(v) for v in history.history["loss"]]
    report["same_predictions"] = bool(np.allclose(restored.predict(x, verbose=0), model.predict(x, verbose=0),
                                                  atol=1e-6))
    report["class"] = type(restored).__name__
    for name, attempt in [
        ("raw_text_fit", lambda: model.fit(["a text"], [0], verbose=0)),
        ("tokenizer", lambda: kbert.Tokenizer),
        ("export", lambda: kbert.export(model, os.path.join(folder, "export"))),
    ]:
        try:
            attempt()
            report[name] = "no error"
        except ImportError as error:
            report[name] = f"{type(error).__name__}: {error}"
    report["tensorflow_loaded"] = "tensorflow" in sys.modules
    with open(os.path.join(folder, f"without-tensorflow-{backend}.json"), "w") as file:
        json.dump(report, file)


def data_parallel(folder, backend):
    import keras
    import numpy as np

    x, y = token_ids(rows=16)
    runs = {}
    for name in ("one_device", "data_parallel"):
        keras.utils.set_random_seed(0)
        distribution = keras.distribution.DataParallel() if name == "data_parallel" else None
        if distribution is not None:
            keras.distribution.set_distribution(distribution)
        model = tiny_classifier()
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        kernel = model.encoder.transformer_layers[0].feedforward_intermediate_dense.kernel.value
        runs[name] = {
            "losses": [float(v) for v in history.history["loss"]],
            "weight_devices": len(kernel.sharding.device_set),
            "predictions": model.predict(x, verbose=0).tolist(),
        }
    runs["devices"] = len(keras.distribution.list_devices())
    runs["same_predictions"] = bool(np.allclose(runs["one_device"]["predictions"],
                                                runs["data_parallel"]["predictions"], atol=1e-5))
    with open(os.path.join(folder, "data-parallel.json"), "w") as file:
        json.dump(runs, file)


JOBS = {job.__name__: job for job in (outputs, train_steps, fine_tune, without_tensorflow, data_parallel)}

if __name__ == "__main__":
    jobs, folder = sys.argv[1:3]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    for job in jobs.split(","):
        JOBS[job](folder, os.environ["KERAS_BACKEND"])
