"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""

from kbert.compression.keep_sparsity import KeepSparsity
from kbert.compression.magnitude_pruning import MagnitudePruning, sparsity_at_step
from kbert.compression.sparsity import format_sparsity, sparsity
