"""Serving: `kbert.export` writes SavedModels that take raw strings; `check_ops` proves TF Serving has their ops.

`check_safe_to_load` is the other list: the ops safe to run in a SavedModel kbert did not make.
"""

from kbert.serving.exporter import export, latest_version, versions
from kbert.serving.op_allowlist import allowed_ops, check_ops, saved_model_ops
from kbert.serving.op_safety import check_safe_to_load
from kbert.serving.saved_model_predictor import SavedModelPredictor
from kbert.serving.serving_module import FROM_TF_EXAMPLE, FROM_TOKEN_IDS, SERVING_DEFAULT, ServingModule

__all__ = [
    "FROM_TF_EXAMPLE",
    "FROM_TOKEN_IDS",
    "SERVING_DEFAULT",
    "SavedModelPredictor",
    "ServingModule",
    "allowed_ops",
    "check_ops",
    "check_safe_to_load",
    "export",
    "latest_version",
    "saved_model_ops",
    "versions",
]
