"""Smaller BERTs: knowledge distillation losses, weight pruning and attention-head pruning."""
