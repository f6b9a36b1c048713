"""The demo: a spam filter trained from raw SMS text, offline, in minutes.

It learns a WordPiece vocabulary, fine-tunes a freshly initialised BERT on a
fixed 80/20 split of the SMS Spam Collection, reports held-out accuracy and
spam precision/recall/F1, shows a few predictions, and checks that the saved
`.keras` model predicts the same after loading. Then it exports the model
for TF Serving (`saved_models/spam/<version>`) and calls the export from a
fresh Python process that imports only TensorFlow and TF-Text. Last, a
taste of pretraining: BERT-tiny learns masked-LM and next-sentence
prediction from the raw text of one book for a few steps, then fills in
blanks.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

SEED = 0

def binary_report(labels, predictions):
    """Accuracy and the positive class's precision, recall and F1."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    true_positive = int(np.sum((predictions == 1) & (labels == 1)))
    false_positive = int(np.sum((predictions == 1) & (labels == 0)))
    false_negative = int(np.sum((predictions == 0) & (labels == 1)))
    true_negative = int(np.sum((predictions == 0) & (labels == 0)))
    precision = true_positive / max(true_positive + false_positive, 1)
    recall = true_positive / max(true_positive + false_negative, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {
        "accuracy": float(np.mean(labels == predictions)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "confusion": [[true_negative, false_positive], [false_negative, true_positive]],
    }


# What a client of the exported model runs: no kbert, no Keras model code.
SERVING_CLIENT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the TF-Text ops the graph tokenizes with)

    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    outputs = serve(text=tf.constant(json.loads(sys.argv[2])))
    print(json.dumps({"labels": [label.decode() for label in outputs["labels"].numpy()],
                      "probabilities": outputs["probabilities"].numpy().tolist(),
                      "kbert_imported": any(name.split(".")[0] == "kbert" for name in sys.modules)}))
    """
)


def run(preset="tiny", epochs=3, sequence_length=64, vocabulary_size=8000, learning_rate=1e-3,
        batch_size=32, pretraining_steps=150, export_dir="saved_models", verbose=1):
    import keras

    from kbert.builders import classifier
    from kbert.data.sms_spam import load_sms_spam, split_sms_spam
    from kbert.preprocessing.vocabulary import learn_vocabulary
    from kbert.saving import load_model

    keras.utils.set_random_seed(SEED)  # the same initial weights every run
    start = time.time()
    texts, labels = load_sms_spam()
    (train_texts, train_labels), (test_texts, test_labels) = split_sms_spam(texts, labels, seed=SEED)
    print(f"SMS Spam Collection: {len(texts)} messages, {int(np.sum(labels))} spam; "
          f"train {len(train_texts)}, held out {len(test_texts)} (fixed split, seed {SEED}).")

    print(f"\n1. Learning a WordPiece vocabulary ({vocabulary_size} tokens) from the training texts")
    vocabulary = learn_vocabulary(train_texts, vocabulary_size=vocabulary_size, verbose=verbose)

    print(f"\n2. Training BERT-{preset} from scratch ({epochs} epochs, sequence length {sequence_length})")
    clf = classifier(preset, num_classes=2, vocabulary=vocabulary,
                     sequence_length=sequence_length, class_names=["ham", "spam"])
    # A model trained from scratch takes a larger step than fine-tuning one.
    clf.compile(learning_rate=learning_rate)
    clf.fit(train_texts, train_labels, batch_size=batch_size, epochs=epochs,
            validation_data=(test_texts, test_labels), verbose=verbose)

    print("\n3. Held-out results")
    predictions = clf.predict(test_texts, verbose=0).argmax(-1)
    report = binary_report(test_labels, predictions)
    (tn, fp), (fn, tp) = report["confusion"]
    print(f"   accuracy {report['accuracy']:.4f}   spam precision {report['precision']:.4f}   "
          f"recall {report['recall']:.4f}   F1 {report['f1']:.4f}")
    print(f"   confusion: ham->ham {tn}, ham->spam {fp}, spam->ham {fn}, spam->spam {tp}")

    examples = ["WINNER!! claim your free prize now", "see you at lunch?",
                "URGENT: your account is locked, text 85233 to unlock", "ok lor, going home now"]
    probabilities = clf.predict_proba(examples, verbose=0)
    print("\n4. Predictions")
    for text, p in zip(examples, probabilities):
        print(f"   {clf.class_names[int(p.argmax())]:>4}  p(spam)={p[1]:.3f}  {text}")

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "spam.keras")
        clf.save(path)
        restored = load_model(path)
        same = np.allclose(restored.predict(examples, verbose=0), clf.predict(examples, verbose=0),
                           atol=1e-5)
    print(f"\n5. Saved as .keras and loaded back: {'same' if same else 'DIFFERENT'} predictions")
    if not same:
        raise SystemExit("The reloaded model predicts differently.")

    if export_dir:
        report["export"] = export_and_serve(clf, os.path.join(export_dir, "spam"), examples)

    if pretraining_steps:
        print(f"\n7. Pretraining from raw text: BERT-tiny, masked LM + next-sentence prediction, "
              f"{pretraining_steps} steps on 'Alice in Wonderland'")
        report["pretraining"] = pretraining_taste(pretraining_steps, verbose=verbose)
    print(f"\nDone in {time.time() - start:.0f} s.")
    return report


def export_and_serve(clf, folder, texts):
    """Exports the model for TF Serving and calls the export from a fresh process."""
    from kbert.serving import export
    from kbert.serving.op_allowlist import check_ops

    path = export(clf, folder)
    ops = check_ops(path)
    print(f"\n6. Exported for TF Serving to {path}: signatures serving_default (raw text), "
          f"from_token_ids, from_tf_example; {len(ops)} op types, all in TF Serving's build")
    result = subprocess.run([sys.executable, "-c", SERVING_CLIENT, path, json.dumps(texts)],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"The exported model failed in a fresh process:\n{result.stderr[-2000:]}")
    served = json.loads(result.stdout.strip().splitlines()[-1])
    same = (not served["kbert_imported"]
            and served["labels"] == [clf.class_names[i] for i in clf.predict(texts, verbose=0).argmax(-1)]
            and all(abs(a - b) < 1e-4 for row, expected in zip(served["probabilities"],
                                                               clf.predict_proba(texts, verbose=0))
                    for a, b in zip(row, expected)))
    print(f"   A fresh Python process (tensorflow + tensorflow_text only) loaded it and answered "
          f"{served['labels']}: {'same as' if same else 'DIFFERENT from'} the Keras model")
    mount = folder if os.path.isabs(folder) else f"$PWD/{folder}"
    print(f"   Serve it: docker run -p 8501:8501 -v {mount}:/models/spam -e MODEL_NAME=spam "
          "tensorflow/serving  (see saved_models/README.rst)")
    if not same:
        raise SystemExit("The exported model answers differently from the Keras model.")
    return {"path": path, "served_labels": served["labels"]}


def pretraining_taste(steps, verbose=1):
    """Pretrains BERT-tiny briefly on one book, then asks it to fill in blanks."""
    from kbert.callbacks import standard
    from kbert.data.paths import data_dir
    from kbert.models.encoder import Encoder
    from kbert.preprocessing.vocabulary import learn_vocabulary
    from kbert.pretraining.dataset import pretraining_dataset
    from kbert.pretraining.fill_mask import fill_mask
    from kbert.pretraining.pretrainer import Pretrainer

    corpus = [str(data_dir() / "gutenberg" / "pg11.txt")]
    vocabulary = learn_vocabulary(files=corpus, vocabulary_size=2000, verbose=False)
    data = pretraining_dataset(corpus, vocabulary=vocabulary, sequence_length=64,
                               batch_size=32, seed=SEED)
    pretrainer = Pretrainer(Encoder.from_preset("tiny", vocabulary_size=len(vocabulary)))
    pretrainer.compile(learning_rate=1e-3)
    with tempfile.TemporaryDirectory() as run_dir:
        history = pretrainer.fit(data, epochs=1, steps_per_epoch=steps, verbose=verbose,
                                 callbacks=standard(run_dir))
        tensorboard = os.path.exists(os.path.join(run_dir, "tensorboard"))
    scores = {name: float(values[-1]) for name, values in history.history.items()}
    print(f"   masked-LM accuracy {scores['mlm_accuracy']:.3f}, next-sentence accuracy "
          f"{scores['nsp_accuracy']:.3f} (training batches); TensorBoard logs "
          f"{'written' if tensorboard else 'MISSING'}")
    fill = fill_mask(pretrainer, vocabulary=vocabulary, top_k=3)
    for text in ["alice was beginning to get very [MASK] .", "\u201cwhat a curious [MASK] !\u201d said alice ."]:
        guesses = ", ".join(f"{c['token']} {c['score']:.2f}" for c in fill(text)[0])
        print(f"   {text}  ->  {guesses}")
    print("   (A minute on one book teaches the most frequent words first; "
          "benchmarks/pretraining.py pretrains longer and measures what it gives SST-2.)")
    return scores
