"""Published BERT and ALBERT checkpoints: load them into kbert, save kbert encoders for others; keras-hub conversions."""

from kbert.checkpoints.checkpoint_files import CheckpointError
from kbert.checkpoints.keras_hub_models import (
    encoder_from_keras_hub,
    encoder_to_keras_hub,
    tokenizer_from_keras_hub,
    tokenizer_to_keras_hub,
)
from kbert.checkpoints.loading import (
    HUB_FILES,
    KNOWN_CHECKPOINTS,
    UnknownCheckpointError,
    checkpoint_format,
    keras_hub_albert_presets,
    keras_hub_bert_presets,
    load_pretrained,
    resolve_checkpoint,
    save_pretrained,
)

__all__ = [
    "CheckpointError",
    "HUB_FILES",
    "KNOWN_CHECKPOINTS",
    "UnknownCheckpointError",
    "checkpoint_format",
    "encoder_from_keras_hub",
    "encoder_to_keras_hub",
    "keras_hub_albert_presets",
    "keras_hub_bert_presets",
    "load_pretrained",
    "resolve_checkpoint",
    "save_pretrained",
    "tokenizer_from_keras_hub",
    "tokenizer_to_keras_hub",
]
