"""Reading a kbert `.keras` file back: `load_model`, with every kbert class registered with Keras first.

Its own room, between the rooms that define kbert's Keras classes (models,
preprocessing, pretraining) and the rooms that read model files
(checkpoints, serving, runs): each of them imports `load_model` from here.
"""

from kbert.saving.model_file import load_model, register_kbert_classes

__all__ = ["load_model", "register_kbert_classes"]
