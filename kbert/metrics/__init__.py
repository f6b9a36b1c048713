"""Evaluation metrics, computed in Python on predictions, as each task's community reports them."""

from kbert.metrics.classification import classification_report, format_classification_report, matthews_correlation
from kbert.metrics.entity_f1 import entity_scores, extract_entities
from kbert.metrics.multi_label import multi_label_report
from kbert.metrics.regression import regression_report
from kbert.metrics.squad import exact_match, f1, normalize_answer, squad_scores

__all__ = [
    "classification_report",
    "format_classification_report",
    "entity_scores",
    "exact_match",
    "extract_entities",
    "f1",
    "matthews_correlation",
    "multi_label_report",
    "normalize_answer",
    "regression_report",
    "squad_scores",
]
