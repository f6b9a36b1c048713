"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.distillation_loss import distillation_loss
from kbert.compression.head_pruning import head_importance, least_important_heads, mask_heads, prune_heads
from kbert.compression.keep_sparsity import KeepSparsity
from kbert.compression.layer_mapping import (
    attention_mean_squared_error,
    check_layer_map,
    encoder_states,
    masked_mean_squared_error,
    uniform_layer_map,
)
from kbert.compression.magnitude_pruning import MagnitudePruning, sparsity_at_step
from kbert.compression.sparsity import format_sparsity, sparsity

__all__ = [
    "KeepSparsity",
    "MagnitudePruning",
    "attention_mean_squared_error",
    "check_layer_map",
    "distillation_loss",
    "encoder_states",
    "format_sparsity",
    "head_importance",
    "least_important_heads",
    "mask_heads",
    "masked_mean_squared_error",
    "prune_heads",
    "sparsity",
    "sparsity_at_step",
    "uniform_layer_map",
]
