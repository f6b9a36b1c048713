"""The knowledge-distillation loss: how far a student's softened predictions are from its teacher's."""

import numbers

from keras import ops


def distillation_loss(student_logits, teacher_logits, temperature=2.0, reduction="mean"):
    """`temperature**2 * KL(softmax(teacher / T) || softmax(student / T))`.

    Hinton et al. (2015), "Distilling the Knowledge in a Neural Network":
    both sets of logits are divided by the temperature `T` before the
    softmax, which spreads the teacher's probability over the wrong classes
    too (its "dark knowledge"); the student is trained to match that whole
    distribution. The gradient of the KL divergence scales as `1 / T**2`, so
    the loss is multiplied by `T**2` to keep it on the scale of a hard-label
    loss whatever `T` is. With `T=1` it is the plain KL divergence.

    The loss is computed in float32 (logits of a mixed-precision model are
    cast first) with `log_softmax`, so large logits do not overflow.

    Args:
        student_logits: `(batch, classes)` logits of the student (any leading
            shape works: the last axis holds the classes).
        teacher_logits: the teacher's logits, of the same shape.
        temperature: `T`, a number > 0.
        reduction: `"mean"` for the mean over the examples (a scalar), or
            `"none"` for one value per example.

    Example:
    >>> teacher = np.array([[2.0, 0.0], [0.0, 1.0]])
    >>> float(distillation_loss(teacher, teacher))  # the same predictions
    0.0
    >>> float(distillation_loss(np.zeros((2, 2)), teacher, temperature=1.0)) > 0
    True
    >>> distillation_loss(np.zeros((2, 2)), teacher, reduction="none").shape
    TensorShape([2])
    """
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature > 0:
        raise ValueError(f"`temperature` must be a number > 0, got {temperature!r}.")
    if reduction not in ("mean", "none"):
        raise ValueError(f"`reduction` must be 'mean' or 'none', got {reduction!r}.")
    temperature = float(temperature)
    student_log_probs = ops.log_softmax(ops.cast(student_logits, "float32") / temperature, axis=-1)
    teacher_log_probs = ops.log_softmax(ops.cast(teacher_logits, "float32") / temperature, axis=-1)
    per_example = ops.sum(ops.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs), axis=-1)
    per_example = temperature**2 * per_example
    return ops.mean(per_example) if reduction == "mean" else per_example
