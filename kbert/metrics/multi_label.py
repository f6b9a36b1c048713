"""Multi-label scores: micro and macro F1 over labels, each example's set of labels against the true one."""

import numpy as np


def multi_label_report(labels, predictions, class_names=None):
    """Micro and macro precision, recall and F1, exact-set accuracy and per-label scores of multi-hot arrays.

    Micro scores count every (example, label) decision together; macro F1
    is the mean of the labels' own F1, so a rare label counts as much as a
    common one.

    Args:
        labels, predictions: `(examples, labels)` arrays of 0 and 1.
        class_names: the labels' names, in column order.

    Example:
    >>> report = multi_label_report([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 1]], ["a", "b", "c"])
    >>> report["micro_f1"], report["macro_f1"], report["exact_match"]
    (0.6666666666666666, 0.6666666666666666, 0.0)
    """
    labels = np.asarray(labels).astype(bool)
    predictions = np.asarray(predictions).astype(bool)
    if labels.ndim != 2 or labels.shape != predictions.shape:
        raise ValueError(f"Labels and predictions must be (examples, labels) arrays of one shape; got "
                         f"{labels.shape} and {predictions.shape}.")
    if len(labels) == 0:
        raise ValueError("Got no examples to score.")
    names = [str(i) for i in range(labels.shape[1])] if class_names is None else [str(n) for n in class_names]
    true_positive = (labels & predictions).sum(axis=0)
    support, predicted = labels.sum(axis=0), predictions.sum(axis=0)
    precision, recall = _divide(true_positive, predicted), _divide(true_positive, support)
    f1 = _divide(2 * precision * recall, precision + recall)
    micro_precision = _divide(true_positive.sum(), predicted.sum())
    micro_recall = _divide(true_positive.sum(), support.sum())
    return {
        "micro_precision": float(micro_precision),
        "micro_recall": float(micro_recall),
        "micro_f1": float(_divide(2 * micro_precision * micro_recall, micro_precision + micro_recall)),
        "macro_f1": float(f1.mean()),
        "exact_match": float((labels == predictions).all(axis=1).mean()),
        "per_class": {name: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                             "support": int(support[i]), "predicted": int(predicted[i])}
                      for i, name in enumerate(names)},
        "num_examples": int(len(labels)),
    }


def _divide(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)
