"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.magnitude_pruning import KeepSparsity, MagnitudePruning, sparsity_at_step
from kbert.compression.sparsity import format_sparsity, sparsity
