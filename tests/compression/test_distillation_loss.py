import keras
import numpy as np
import pytest

from kbert.backend import gradient_function
from kbert.compression import distillation_loss
from tests.test_case import assert_allclose, dtype, numpy

# A loss of `keras.ops`: the same on every backend.
pytestmark = pytest.mark.all_backends

STUDENT = np.array([[1.0, -0.5, 2.0], [0.0, 0.3, -1.2], [4.0, 4.0, -3.0]], "float32")
TEACHER = np.array([[2.5, 0.0, 1.0], [-1.0, 2.0, 0.5], [1.0, 3.0, 0.0]], "float32")


def hand_computed(student, teacher, temperature):
    """T^2 * sum_k p_k (log p_k - log q_k), p the teacher's softened softmax, q the student's."""

    def softmax(logits):
        exp = np.exp(logits / temperature - (logits / temperature).max(-1, keepdims=True))
        return exp / exp.sum(-1, keepdims=True)

    p, q = softmax(teacher.astype("float64")), softmax(student.astype("float64"))
    return temperature**2 * (p * (np.log(p) - np.log(q))).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_equals_the_hand_computed_loss(temperature):
    expected = hand_computed(STUDENT, TEACHER, temperature)
    per_example = distillation_loss(STUDENT, TEACHER, temperature, reduction="none")
    assert_allclose(numpy(per_example), expected, rtol=1e-5)
    assert_allclose(numpy(distillation_loss(STUDENT, TEACHER, temperature)), expected.mean(), rtol=1e-5)


def test_is_zero_for_equal_predictions_and_positive_otherwise():
    assert float(distillation_loss(TEACHER, TEACHER)) == pytest.approx(0.0, abs=1e-6)
    # Shifting logits does not change a softmax.
    assert float(distillation_loss(TEACHER + 5.0, TEACHER)) == pytest.approx(0.0, abs=1e-5)
    assert (numpy(distillation_loss(STUDENT, TEACHER, reduction="none")) > 0).all()


def test_gradient_is_temperature_times_the_probability_gap():
    # d/ds [T^2 KL(p || q)] = T (q - p): the T^2 factor keeps gradients on the
    # scale of a hard-label loss whatever the temperature.
    temperature = 4.0
    student = keras.Variable(STUDENT)
    (gradient,) = gradient_function(lambda: distillation_loss(student.value, TEACHER, temperature), [student])()
    q = numpy(keras.ops.softmax(STUDENT / temperature))
    p = numpy(keras.ops.softmax(TEACHER / temperature))
    expected = temperature * (q - p) / len(STUDENT)  # the mean over the batch
    assert_allclose(numpy(gradient), expected, atol=1e-6)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_computes_in_float32_for_mixed_precision_logits(half):
    loss = distillation_loss(keras.ops.cast(STUDENT, half), keras.ops.cast(TEACHER, half), 2.0)
    assert dtype(loss) == "float32"
    rounded = [numpy(keras.ops.cast(keras.ops.cast(x, half), "float32")) for x in (STUDENT, TEACHER)]
    assert_allclose(numpy(loss), hand_computed(*rounded, 2.0).mean(), rtol=1e-5)


def test_large_logits_stay_finite():
    student = np.array([[3000.0, -3000.0]], "float32")
    teacher = np.array([[-3000.0, 3000.0]], "float32")
    loss = float(distillation_loss(student, teacher, 1.0))
    # The teacher is sure of class 1, the student of class 0: KL = 6000.
    assert np.isfinite(loss) and loss == pytest.approx(6000.0, rel=1e-5)


@pytest.mark.parametrize("temperature", [0, 0.0, -1.0, float("nan"), True, "2"])
def test_temperature_must_be_positive(temperature):
    with pytest.raises(ValueError, match=r"`temperature` must be a number > 0, got"):
        distillation_loss(STUDENT, TEACHER, temperature)


def test_unknown_reduction_is_named():
    with pytest.raises(ValueError, match="'sum'"):
        distillation_loss(STUDENT, TEACHER, reduction="sum")
