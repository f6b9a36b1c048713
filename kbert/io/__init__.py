"""What kbert reads and writes outside a model: atomic writes, text files, `.keras` checks, progress lines."""
