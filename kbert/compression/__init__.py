"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.distillation_loss import distillation_loss

__all__ = ["distillation_loss"]
