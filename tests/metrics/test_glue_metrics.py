"""Matthews' correlation, Pearson and Spearman, and multi-label F1, against scikit-learn and SciPy on the same data."""

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sklearn_metrics

from kbert.metrics import classification_report, matthews_correlation, multi_label_report, regression_report


@pytest.mark.parametrize("num_classes", [2, 3])
def test_matthews_correlation_agrees_with_scikit_learn(num_classes):
    rng = np.random.default_rng(num_classes)
    labels = rng.integers(0, num_classes, 200)
    predictions = np.where(rng.random(200) < 0.6, labels, rng.integers(0, num_classes, 200))
    report = classification_report(labels, predictions, num_classes=num_classes)
    assert report["matthews_correlation"] == pytest.approx(sklearn_metrics.matthews_corrcoef(labels, predictions))
    assert matthews_correlation([[7, 0], [3, 0]]) == 0.0  # one class answered for everything


def test_pearson_and_spearman_agree_with_scipy_ties_included():
    rng = np.random.default_rng(0)
    labels = np.round(rng.uniform(0, 5, 300), 1)  # STS-B-like scores, with ties
    predictions = labels + rng.normal(0, 1, 300)
    predictions[:20] = 2.5
    report = regression_report(labels, predictions)
    assert report["pearson"] == pytest.approx(stats.pearsonr(labels, predictions)[0])
    assert report["spearman"] == pytest.approx(stats.spearmanr(labels, predictions)[0])
    assert report["mse"] == pytest.approx(np.mean((labels - predictions) ** 2))
    assert regression_report([1.0, 2.0], [3.0, 3.0])["pearson"] == 0.0
    with pytest.raises(ValueError, match="finite"):
        regression_report([1.0, np.nan], [1.0, 2.0])


def test_multi_label_f1_agrees_with_scikit_learn():
    rng = np.random.default_rng(1)
    labels = rng.random((100, 4)) < 0.3
    predictions = np.where(rng.random((100, 4)) < 0.7, labels, ~labels)
    report = multi_label_report(labels, predictions, ["a", "b", "c", "d"])
    assert report["micro_f1"] == pytest.approx(sklearn_metrics.f1_score(labels, predictions, average="micro"))
    assert report["macro_f1"] == pytest.approx(sklearn_metrics.f1_score(labels, predictions, average="macro"))
    assert report["exact_match"] == pytest.approx(sklearn_metrics.accuracy_score(labels, predictions))
    assert report["per_class"]["b"]["support"] == int(labels[:, 1].sum())
