"""Published BERT checkpoints: load them into kbert, save kbert encoders for others."""

from kbert.checkpoints.loading import (
    KNOWN_CHECKPOINTS,
    checkpoint_format,
    load_pretrained,
    resolve_checkpoint,
    save_pretrained,
)

__all__ = [
    "KNOWN_CHECKPOINTS",
    "checkpoint_format",
    "load_pretrained",
    "resolve_checkpoint",
    "save_pretrained",
]
