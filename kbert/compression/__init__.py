"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.layer_mapping import (
    attention_mean_squared_error,
    check_layer_map,
    encoder_states,
    masked_mean_squared_error,
    uniform_layer_map,
)

__all__ = [
    "attention_mean_squared_error",
    "check_layer_map",
    "encoder_states",
    "masked_mean_squared_error",
    "uniform_layer_map",
]
