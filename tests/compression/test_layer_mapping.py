import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.backend import gradient_function
from kbert.callbacks.attention_map_logger import attention_scores
from kbert.compression import (
    attention_mean_squared_error,
    check_layer_map,
    encoder_states,
    masked_mean_squared_error,
    uniform_layer_map,
)
from tests.test_case import assert_allclose, numpy, tiny_encoder_kwargs

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

INPUTS = {
    "token_ids": np.array([[2, 5, 7, 9, 3, 0], [2, 6, 3, 0, 0, 0]], "int32"),
    "segment_ids": np.array([[0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], "int32"),
}


@pytest.mark.parametrize(
    "teacher_layers, student_layers, expected",
    [(6, 3, (1, 3, 5)), (4, 4, (0, 1, 2, 3)), (12, 4, (2, 5, 8, 11)), (6, 4, (0, 2, 3, 5)), (5, 1, (4,))],
)
def test_uniform_layer_map(teacher_layers, student_layers, expected):
    layer_map = uniform_layer_map(teacher_layers, student_layers)
    assert layer_map == expected
    # Every student layer learns from a later teacher layer than the one before, the last from the last.
    assert list(layer_map) == sorted(set(layer_map)) and layer_map[-1] == teacher_layers - 1


def test_uniform_layer_map_rejects_a_deeper_student_and_bad_counts():
    with pytest.raises(ValueError, match="deeper than its teacher"):
        uniform_layer_map(2, 4)
    with pytest.raises(ValueError, match="`student_layers` must be a positive integer, got 0"):
        uniform_layer_map(4, 0)
    with pytest.raises(ValueError, match="`teacher_layers`"):
        uniform_layer_map(4.0, 2)


def test_check_layer_map_accepts_any_valid_map_and_defaults_to_uniform():
    assert check_layer_map(None, 6, 3) == (1, 3, 5)
    assert check_layer_map([5, 5, 0], 6, 3) == (5, 5, 0)
    assert check_layer_map(np.array([0, 1]), 2, 2) == (0, 1)
    assert all(type(index) is int for index in check_layer_map(np.array([0, 1]), 2, 2))


@pytest.mark.parametrize(
    "layer_map, error, message",
    [
        ([1, 3], ValueError, r"one teacher layer per student layer \(3\), got 2"),
        ([1, 3, 5, 5], ValueError, r"one teacher layer per student layer \(3\), got 4"),
        ([1, 3, 6], ValueError, "entry 2 is 6, outside the teacher's layers 0 to 5"),
        ([-1, 3, 5], ValueError, "entry 0 is -1, outside the teacher's layers 0 to 5"),
        ([1, 3.0, 5], TypeError, "entry 1 must be an integer layer index, got 3.0"),
        ([1, True, 5], TypeError, "entry 1 must be an integer"),
        ("135", TypeError, "list of teacher layer indices"),
        (3, TypeError, "list of teacher layer indices"),
    ],
)
def test_check_layer_map_errors(layer_map, error, message):
    with pytest.raises(error, match=message):
        check_layer_map(layer_map, teacher_layers=6, student_layers=3)


@pytest.mark.parametrize("architecture", ["bert", "albert"])
def test_encoder_states_are_the_encoders_own(architecture):
    encoder = kbert.Encoder(**tiny_encoder_kwargs(vocabulary_size=10, architecture=architecture))
    states = encoder_states(encoder, INPUTS, training=False)
    outputs = encoder(INPUTS, training=False)
    assert len(states["hidden_states"]) == len(states["attention_scores"]) == encoder.num_layers
    for mine, its in zip(states["hidden_states"], outputs["encoder_outputs"]):
        assert_allclose(numpy(mine), numpy(its), atol=1e-5)
    assert_allclose(
        numpy(states["embeddings"]),
        numpy(encoder.embed(INPUTS["token_ids"], INPUTS["segment_ids"], training=False)),
    )
    for mine, logged in zip(states["attention_scores"], attention_scores(encoder, INPUTS)):
        assert_allclose(numpy(mine), logged, atol=1e-6)
    assert "attention_scores" not in encoder_states(encoder, INPUTS, attention=False)


def test_encoder_states_are_differentiable():
    # (On TensorFlow `gradient_function` is a `tf.function`: differentiable in a graph.)
    encoder = kbert.Encoder(**tiny_encoder_kwargs(vocabulary_size=10))

    def total():
        states = encoder_states(encoder, INPUTS, training=True)
        squares = sum(keras.ops.sum(keras.ops.square(s)) for s in states["attention_scores"])
        return squares + keras.ops.sum(states["hidden_states"][-1])

    gradients = gradient_function(total, encoder.transformer_layers[0].trainable_variables)()
    assert all(g is not None and np.isfinite(numpy(g)).all() for g in gradients)


def test_masked_mean_squared_error_leaves_padding_out():
    rng = np.random.default_rng(0)
    student, teacher = rng.normal(size=(2, 2, 6, 3))
    mask = INPUTS["padding_mask"]
    real = mask.astype(bool)
    expected = np.mean((student[real] - teacher[real]) ** 2)
    assert_allclose(masked_mean_squared_error(student, teacher, mask), expected, rtol=1e-5)
    # Whatever the padding holds.
    student[~real] = 1e3
    assert_allclose(masked_mean_squared_error(student, teacher, mask), expected, rtol=1e-5)


def numpy_attention_mse(student, teacher, mask):
    if student.shape[1] != teacher.shape[1]:
        student, teacher = student.mean(1, keepdims=True), teacher.mean(1, keepdims=True)
    total, count = 0.0, 0
    for b, row in enumerate(mask):
        n = int(row.sum())  # real tokens come first
        diff = student[b, :, :n, :n] - teacher[b, :, :n, :n]
        total += np.sum(diff**2)
        count += diff.size
    return total / count


@pytest.mark.parametrize("student_heads", [4, 2])
def test_attention_mean_squared_error_head_by_head_or_head_means(student_heads):
    # Real maps: a 4-head teacher and a student of 4 or 2 heads.
    teacher_encoder = kbert.Encoder(**{**tiny_encoder_kwargs(vocabulary_size=10), "num_heads": 4})
    student_encoder = kbert.Encoder(**{**tiny_encoder_kwargs(vocabulary_size=10), "num_heads": student_heads})
    teacher = attention_scores(teacher_encoder, INPUTS)[0]
    student = attention_scores(student_encoder, INPUTS)[0]
    mask = INPUTS["padding_mask"]
    expected = numpy_attention_mse(student, teacher, mask)
    assert_allclose(attention_mean_squared_error(student, teacher, mask), expected, rtol=1e-5)
    if student_heads == 2:
        # Head means: not the same as comparing every student head with the teacher's mean.
        head_by_head = np.mean([numpy_attention_mse(student[:, h:h + 1], teacher.mean(1, keepdims=True),
                                                    mask) for h in range(2)])
        assert not np.isclose(expected, head_by_head)
    assert float(attention_mean_squared_error(teacher, teacher, mask)) == 0.0
