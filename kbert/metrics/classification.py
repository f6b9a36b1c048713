"""Classification scores: accuracy, precision, recall, F1 and the confusion matrix."""

import numpy as np


def classification_report(labels, predictions, num_classes=None, class_names=None, positive_class=1):
    """Scores predicted class ids against the true ones, as classification papers report them.

    The confusion matrix has one row per true class and one column per
    predicted class: `confusion_matrix[i][j]` counts the examples of class
    `i` predicted as `j`. From it, each class gets its precision (of the
    examples predicted as the class, the share that are), recall (of the
    examples of the class, the share found) and F1 (their harmonic mean). A
    share with nothing to divide by (a class never predicted, or absent)
    counts as 0.0, as scikit-learn's default does.

    Args:
        labels: the true class ids, a flat list or array of ints.
        predictions: the predicted class ids; or scores of shape
            `(examples, num_classes)` (logits or probabilities), whose
            argmax is taken.
        num_classes: the number of classes; defaults to `len(class_names)`,
            else to the largest id seen plus one.
        class_names: optional names of the classes, in id order, used as the
            keys of `per_class`.
        positive_class: for two classes, the id (or name) of the class whose
            precision, recall and F1 are reported at the top level, e.g.
            spam or paraphrase. Ignored for more than two classes.

    Returns:
        A dict:

        - `accuracy`: the share of examples predicted right;
        - `precision`, `recall`, `f1`: of the positive class (two classes
          only);
        - `macro_f1`: the mean of the per-class F1 scores;
        - `confusion_matrix`: a nested list of ints, rows true, columns
          predicted;
        - `per_class`: `{name: {"precision", "recall", "f1", "support"}}`,
          support being the number of true examples of the class;
        - `num_examples`.

    Example:
    >>> report = classification_report([0, 0, 1, 1, 1], [0, 1, 1, 1, 0], class_names=["ham", "spam"])
    >>> report["accuracy"], report["precision"], report["recall"]
    (0.6, 0.6666666666666666, 0.6666666666666666)
    >>> report["confusion_matrix"]
    [[1, 1], [1, 2]]
    """
    labels = _class_ids(labels, "labels")
    predictions = np.asarray(predictions)
    if predictions.ndim == 2:
        if num_classes is not None and predictions.shape[1] != num_classes:
            raise ValueError(
                f"Prediction scores have {predictions.shape[1]} columns for {num_classes} classes."
            )
        predictions = predictions.argmax(axis=-1)
    predictions = _class_ids(predictions, "predictions")
    if len(labels) != len(predictions):
        raise ValueError(f"Got {len(labels)} labels but {len(predictions)} predictions.")
    if len(labels) == 0:
        raise ValueError("Got no examples to score.")

    if num_classes is None:
        if class_names is not None:
            num_classes = len(class_names)
        else:
            num_classes = int(max(labels.max(), predictions.max())) + 1
    if int(num_classes) != num_classes or num_classes < 2:
        raise ValueError(f"`num_classes` must be an integer of at least 2, got {num_classes!r}.")
    num_classes = int(num_classes)
    if class_names is None:
        class_names = [str(i) for i in range(num_classes)]
    class_names = [str(name) for name in class_names]
    if len(class_names) != num_classes:
        raise ValueError(f"Got {len(class_names)} class names for {num_classes} classes: {class_names}.")
    for name, ids in (("labels", labels), ("predictions", predictions)):
        bad = np.flatnonzero(ids >= num_classes)
        if bad.size:
            raise ValueError(
                f"{name.capitalize()} must be in [0, {num_classes}); {ids[bad[0]]} at index "
                f"{bad[0]} is not."
            )

    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(confusion, (labels, predictions), 1)
    correct = np.diag(confusion)
    support = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    precision = _divide(correct, predicted)
    recall = _divide(correct, support)
    f1 = _divide(2 * precision * recall, precision + recall)

    report = {"accuracy": float(correct.sum() / len(labels))}
    if num_classes == 2:
        positive = _positive_class_id(positive_class, class_names)
        report.update(
            precision=float(precision[positive]),
            recall=float(recall[positive]),
            f1=float(f1[positive]),
        )
    report.update(
        macro_f1=float(f1.mean()),
        matthews_correlation=matthews_correlation(confusion),
        confusion_matrix=confusion.tolist(),
        per_class={
            name: {
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(support[i]),
            }
            for i, name in enumerate(class_names)
        },
        num_examples=len(labels),
    )
    return report


def matthews_correlation(confusion):
    """Matthews' correlation coefficient of a confusion matrix (rows true, columns predicted), any number of classes.

    1 is perfect, 0 no better than chance (and the value when every answer
    is one class), -1 always wrong; GLUE scores CoLA with it. For more than
    two classes it is Gorodkin's generalization (scikit-learn's too).

    >>> round(matthews_correlation([[5, 1], [2, 4]]), 4)
    0.5071
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    total, correct = confusion.sum(), np.trace(confusion)
    true, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    denominator = np.sqrt((total**2 - predicted @ predicted) * (total**2 - true @ true))
    return float((correct * total - predicted @ true) / denominator) if denominator else 0.0


def format_classification_report(report, digits=4):
    """A plain-text table of a `classification_report`: per-class scores, then the confusion matrix.

    Example:
    >>> report = classification_report([0, 1, 1], [0, 1, 0], class_names=["ham", "spam"])
    >>> print(format_classification_report(report).splitlines()[-1])
    spam           1     1
    """
    names = list(report["per_class"])
    width = max(10, *(len(name) for name in names))
    lines = [f"{'':<{width}}  precision  recall     f1         support"]
    for name, scores in report["per_class"].items():
        lines.append(
            f"{name:<{width}}  {scores['precision']:<9.{digits}f}  {scores['recall']:<9.{digits}f}"
            f"  {scores['f1']:<9.{digits}f}  {scores['support']}"
        )
    lines.append(f"accuracy {report['accuracy']:.{digits}f}   macro F1 {report['macro_f1']:.{digits}f}"
                 f"   ({report['num_examples']} examples)")
    lines.append("")
    lines.append("confusion matrix (rows: true, columns: predicted)")
    cell = max(len(str(value)) for row in report["confusion_matrix"] for value in row)
    cell = max(cell, *(len(name) for name in names))
    lines.append(f"{'':<{width}}  " + "  ".join(f"{name:>{cell}}" for name in names))
    for name, row in zip(names, report["confusion_matrix"]):
        lines.append(f"{name:<{width}}  " + "  ".join(f"{value:>{cell}}" for value in row))
    return "\n".join(lines)


def _class_ids(values, name):
    values = np.asarray(values)
    if values.ndim == 2 and values.shape[-1] == 1:
        values = values[:, 0]
    if values.ndim != 1 or not (
        np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.bool_)
    ):
        if values.size == 0 and values.ndim == 1:
            return values.astype(np.int64)
        raise ValueError(
            f"`{name}` must be a flat list of integer class ids, got dtype {values.dtype} "
            f"and shape {values.shape}."
        )
    values = values.astype(np.int64)
    bad = np.flatnonzero(values < 0)
    if bad.size:
        raise ValueError(f"`{name}` must be class ids of 0 or more; {values[bad[0]]} at index {bad[0]} is not.")
    return values


def _divide(numerator, denominator):
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


def _positive_class_id(positive_class, class_names):
    if isinstance(positive_class, str):
        if positive_class not in class_names:
            raise ValueError(f"`positive_class` {positive_class!r} is not one of {class_names}.")
        return class_names.index(positive_class)
    if isinstance(positive_class, (float, np.floating)) or positive_class not in (0, 1):
        raise ValueError(f"`positive_class` must be 0 or 1 (or a class name), got {positive_class!r}.")
    return int(positive_class)
