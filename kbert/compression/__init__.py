"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.head_pruning import head_importance, least_important_heads, mask_heads, prune_heads

__all__ = ["head_importance", "least_important_heads", "mask_heads", "prune_heads"]
