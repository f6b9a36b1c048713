"""Regression scores: mean squared error, Pearson's and Spearman's correlations, as STS-B is scored."""

import numpy as np


def regression_report(labels, predictions):
    """`mse`, `pearson`, `spearman` and `num_examples` of predicted scores against true ones.

    Spearman's correlation is Pearson's of the ranks, ties given their mean
    rank. A correlation is 0 where either side is constant.

    Example:
    >>> report = regression_report([0.0, 1.0, 2.0, 3.0], [0.1, 0.9, 2.5, 2.4])
    >>> round(report["pearson"], 4), report["spearman"], round(report["mse"], 4)
    (0.9355, 0.8, 0.1575)
    """
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    predictions = np.asarray(predictions, dtype=np.float64).reshape(-1)
    if len(labels) != len(predictions):
        raise ValueError(f"Got {len(labels)} labels but {len(predictions)} predictions.")
    if len(labels) == 0:
        raise ValueError("Got no examples to score.")
    if not (np.isfinite(labels).all() and np.isfinite(predictions).all()):
        raise ValueError("Labels and predictions must be finite numbers.")
    return {
        "mse": float(np.mean((labels - predictions) ** 2)),
        "pearson": pearson(labels, predictions),
        "spearman": pearson(_ranks(labels), _ranks(predictions)),
        "num_examples": int(len(labels)),
    }


def pearson(a, b):
    a, b = np.asarray(a, dtype=np.float64) - np.mean(a), np.asarray(b, dtype=np.float64) - np.mean(b)
    denominator = np.sqrt((a @ a) * (b @ b))
    return float(a @ b / denominator) if denominator else 0.0


def _ranks(values):
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    for value in np.unique(values):  # ties: their mean rank
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks
