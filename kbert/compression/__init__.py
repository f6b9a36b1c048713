"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.head_pruning import head_importance, least_important_heads, mask_heads, prune_heads
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
    "head_importance",
    "least_important_heads",
    "mask_heads",
    "masked_mean_squared_error",
    "prune_heads",
    "uniform_layer_map",
]
