import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.metrics import classification_report, format_classification_report


def test_binary_report_worked_by_hand():
    # true ham ham spam spam spam, predicted ham spam spam spam ham:
    # spam TP 2, FP 1, FN 1; ham TP 1, FP 1, FN 1.
    report = classification_report([0, 0, 1, 1, 1], [0, 1, 1, 1, 0], class_names=["ham", "spam"])
    assert report["accuracy"] == pytest.approx(3 / 5)
    assert report["precision"] == pytest.approx(2 / 3)
    assert report["recall"] == pytest.approx(2 / 3)
    assert report["f1"] == pytest.approx(2 / 3)
    assert report["macro_f1"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert report["confusion_matrix"] == [[1, 1], [1, 2]]
    assert report["per_class"]["ham"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert report["per_class"]["spam"]["support"] == 3
    assert report["num_examples"] == 5


def test_positive_class_by_id_or_name():
    labels, predictions = [0, 0, 0, 1], [0, 1, 1, 1]
    spam = classification_report(labels, predictions)
    assert (spam["precision"], spam["recall"]) == pytest.approx((1 / 3, 1.0))
    ham = classification_report(labels, predictions, class_names=["ham", "spam"], positive_class="ham")
    assert (ham["precision"], ham["recall"]) == pytest.approx((1.0, 1 / 3))
    assert classification_report(labels, predictions, positive_class=0)["f1"] == ham["f1"]


def test_three_classes_worked_by_hand():
    labels = [0, 1, 2, 2, 1, 0]
    predictions = [0, 2, 2, 1, 1, 1]
    report = classification_report(labels, predictions, class_names=["entailment", "neutral", "contradiction"])
    assert report["confusion_matrix"] == [[1, 1, 0], [0, 1, 1], [0, 1, 1]]
    assert report["accuracy"] == pytest.approx(0.5)
    # neutral: predicted 3 times, right once; 2 true examples, found once.
    assert report["per_class"]["neutral"]["precision"] == pytest.approx(1 / 3)
    assert report["per_class"]["neutral"]["f1"] == pytest.approx(2 / 5)
    assert report["per_class"]["entailment"]["f1"] == pytest.approx(2 / 3)
    assert report["macro_f1"] == pytest.approx((2 / 3 + 2 / 5 + 1 / 2) / 3)
    # Positive-class scores exist for two classes only.
    assert "precision" not in report and "f1" not in report


def test_a_class_never_predicted_scores_zero():
    report = classification_report([0, 1, 1], [0, 0, 0])
    assert report["precision"] == report["recall"] == report["f1"] == 0.0
    assert report["per_class"]["0"]["f1"] == pytest.approx(0.5)
    assert report["macro_f1"] == pytest.approx(0.25)


def test_scores_are_reduced_to_their_argmax_and_num_classes_is_kept():
    logits = np.array([[2.0, 0.1, 0.0], [0.0, 3.0, 1.0], [0.0, 0.0, 1.0]])
    report = classification_report([0, 1, 1], logits)
    assert report["confusion_matrix"] == [[1, 0, 0], [0, 1, 1], [0, 0, 0]]
    # num_classes larger than any id seen: the matrix has the unseen class too.
    report = classification_report([0, 1], [0, 1], num_classes=3)
    assert len(report["confusion_matrix"]) == 3 and report["per_class"]["2"]["support"] == 0


def test_agrees_with_keras_metrics():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=200)
    predictions = np.where(rng.random(200) < 0.7, labels, 1 - labels)
    report = classification_report(labels, predictions)
    precision = keras.metrics.Precision()
    precision.update_state(labels, predictions)
    recall = keras.metrics.Recall()
    recall.update_state(labels, predictions)
    assert report["precision"] == pytest.approx(float(precision.result()), rel=1e-6)
    assert report["recall"] == pytest.approx(float(recall.result()), rel=1e-6)

    labels = rng.integers(0, 4, size=300)
    predictions = np.where(rng.random(300) < 0.5, labels, rng.integers(0, 4, size=300))
    report = classification_report(labels, predictions)
    f1 = keras.metrics.F1Score(average="macro")
    f1.update_state(np.eye(4)[labels], np.eye(4)[predictions])
    assert report["macro_f1"] == pytest.approx(float(f1.result()), rel=1e-5)
    expected = tf.math.confusion_matrix(labels, predictions, num_classes=4).numpy()
    assert report["confusion_matrix"] == expected.tolist()


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (([0, 1, 1], [0, 1]), {}, "3 labels but 2 predictions"),
        (([0.5, 1], [0, 1]), {}, "integer class ids"),
        (([0, -1], [0, 1]), {}, "-1 at index 1"),
        (([0, 3], [0, 1]), {"num_classes": 3}, r"Labels must be in \[0, 3\); 3 at index 1"),
        (([0, 1], [0, 1]), {"class_names": ["a", "b", "c"], "num_classes": 2}, "3 class names for 2"),
        (([0, 1], [0, 1]), {"class_names": ["ham", "spam"], "positive_class": "eggs"}, "'eggs' is not one of"),
        (([0, 1], [0, 1]), {"positive_class": 2}, "must be 0 or 1"),
        (([], []), {}, "no examples"),
        (([0, 1], np.zeros((2, 3))), {"num_classes": 2}, "3 columns for 2 classes"),
    ],
)
def test_bad_input_is_named(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        classification_report(*args, **kwargs)


def test_format_shows_scores_and_matrix():
    report = classification_report([0, 0, 1, 1, 1], [0, 1, 1, 1, 0], class_names=["ham", "spam"])
    text = format_classification_report(report)
    lines = text.splitlines()
    assert lines[1].split() == ["ham", "0.5000", "0.5000", "0.5000", "2"]
    assert lines[-2].split() == ["ham", "1", "1"] and lines[-1].split() == ["spam", "1", "2"]
    assert "accuracy 0.6000" in text
