"""Published BERT and ALBERT checkpoints: load them into kbert, save kbert encoders for others; keras-hub conversions.

`resolve_encoder` says what any `encoder` argument names (a preset, a checkpoint, a `.keras` file, an encoder or
a keras-hub backbone) and returns it as an encoder and its tokenizer; `resolve_pretrainer` the same, with the
pretraining heads. `load_adapter` builds a LoRA adapter file's task model on its base encoder.
"""

from kbert.checkpoints.adapter_loading import load_adapter
from kbert.checkpoints.checkpoint_files import CheckpointError
from kbert.checkpoints.encoder_argument import UnknownEncoderError, resolve_encoder, resolve_pretrainer
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
    "UnknownEncoderError",
    "checkpoint_format",
    "encoder_from_keras_hub",
    "encoder_to_keras_hub",
    "keras_hub_albert_presets",
    "keras_hub_bert_presets",
    "load_adapter",
    "load_pretrained",
    "resolve_checkpoint",
    "resolve_encoder",
    "resolve_pretrainer",
    "save_pretrained",
    "tokenizer_from_keras_hub",
    "tokenizer_to_keras_hub",
]
