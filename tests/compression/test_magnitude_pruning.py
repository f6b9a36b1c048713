import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.compression.magnitude_pruning import sparsity_at_step
from kbert.compression.sparsity import prunable_kernels
from tests.callbacks.event_files import scalars
from tests.test_case import (
    BACKEND,
    assert_allclose,
    assert_array_equal,
    numpy,
    tiny_classifier,
    tiny_encoder_kwargs,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

TEXTS = ["a good film", "a bad film", "the cat sat on the mat", "free prize now!"] * 2
LABELS = [1, 0, 1, 0] * 2
# 4 batches of 2 an epoch.
BATCH_SIZE = 2


@pytest.fixture(scope="module")
def shared():
    """One classifier and its initial weights: tests reset it rather than build (and trace) their own."""
    keras.utils.set_random_seed(1)
    model = tiny_classifier(sequence_length=8)
    return model, model.get_weights()


@pytest.fixture
def model(shared):
    """The shared classifier with its initial weights, not pruned."""
    model, initial = shared
    model.set_weights(initial)
    model.keep_sparsity = False
    return model


def fit(model, epochs=2, callbacks=()):
    return model.fit(TEXTS, LABELS, batch_size=BATCH_SIZE, epochs=epochs, callbacks=list(callbacks), verbose=0)


def kernels(model):
    return [numpy(kernel) for _, _, kernel in prunable_kernels(model.encoder)]


def zero_fractions(model):
    return [float(np.mean(kernel == 0)) for kernel in kernels(model)]


def other_weights(model):
    """Every weight of the model that is not a prunable kernel, by path."""
    pruned = {id(kernel) for _, _, kernel in prunable_kernels(model.encoder)}
    return {weight.path: numpy(weight) for weight in model.weights if id(weight) not in pruned}


class RecordZeros(keras.callbacks.Callback):
    """The zero positions of every prunable kernel after each batch."""

    def __init__(self):
        super().__init__()
        self.zeros = []

    def on_train_batch_end(self, batch, logs=None):
        self.zeros.append([kernel == 0 for kernel in kernels(self.model)])


def test_the_schedule_is_cubic_from_the_initial_to_the_target_sparsity():
    begin, end, target = 10, 110, 0.8
    assert sparsity_at_step(0, target, begin, end) == 0.0
    assert sparsity_at_step(begin, target, begin, end) == 0.0
    assert sparsity_at_step(end, target, begin, end) == pytest.approx(target)
    assert sparsity_at_step(end + 50, target, begin, end) == pytest.approx(target)
    for t in (0.1, 0.25, 0.5, 0.9):
        step = begin + t * (end - begin)
        assert sparsity_at_step(step, target, begin, end) == pytest.approx(target * (1 - (1 - t) ** 3))
        # From a sparsity already present, the same curve between it and the target.
        assert sparsity_at_step(step, target, begin, end, initial_sparsity=0.2) == pytest.approx(
            0.2 + (target - 0.2) * (1 - (1 - t) ** 3)
        )
    values = [sparsity_at_step(step, target, begin, end) for step in range(begin, end + 1)]
    assert values == sorted(values)
    # Fast at first, slow near the end.
    assert values[10] - values[0] > values[-1] - values[-11]


@pytest.fixture(scope="module")
def pruned_run(shared, tmp_path_factory):
    """The shared classifier pruned to 0.5 in 2 epochs of 4 steps, TensorBoard listed first: what it left."""
    model, initial = shared
    model.set_weights(initial)
    before = other_weights(model)
    log_dir = tmp_path_factory.mktemp("tensorboard")
    recorder = RecordZeros()
    history = fit(model, callbacks=[
        keras.callbacks.TensorBoard(str(log_dir)), kbert.MagnitudePruning(0.5, frequency=2), recorder
    ])
    return {
        "before": before,
        "after": other_weights(model),
        "kernels": kernels(model),
        "embeddings": model.encoder.token_embedding.embeddings.path,
        "config": model.get_config(),
        "history": history.history,
        "log_dir": log_dir,
        "zeros": recorder.zeros,
    }


def test_every_kernel_reaches_the_target_and_nothing_else_is_pruned(pruned_run):
    for kernel in pruned_run["kernels"]:
        assert abs(np.mean(kernel == 0) - 0.5) <= 1 / kernel.size
    assert len(pruned_run["kernels"]) == 2 * 6
    # Embeddings, biases, LayerNorm, pooler and head: trained, with no new
    # zeros (biases start at 0 and leave it).
    before, after = pruned_run["before"], pruned_run["after"]
    for path, value in after.items():
        assert np.count_nonzero(value == 0) <= np.count_nonzero(before[path] == 0), path
    embeddings = pruned_run["embeddings"]
    assert not np.allclose(after[embeddings], before[embeddings])
    assert pruned_run["config"]["keep_sparsity"] is True


def test_pruned_weights_stay_zero_and_sparsity_rises(pruned_run):
    recorded = pruned_run["zeros"]
    assert len(recorded) == 8
    for earlier, later in zip(recorded, recorded[1:]):
        for zeros_then, zeros_now in zip(earlier, later):
            assert np.all(zeros_now[zeros_then])  # once pruned, 0 for good
    # Updates every 2 steps: the schedule's value at steps 2, 4, 6, 8 (the end).
    fractions = [float(np.mean(np.concatenate([z.ravel() for z in zeros]))) for zeros in recorded]
    expected = [sparsity_at_step(step // 2 * 2, 0.5, 0, 8) for step in range(1, 9)]
    assert_allclose(fractions, expected, atol=1e-3)
    assert pruned_run["history"]["sparsity"] == pytest.approx([expected[3], 0.5], abs=1e-3)


def test_sparsity_is_logged_to_tensorboard(pruned_run):
    logged = scalars(pruned_run["log_dir"] / "train")["epoch_sparsity"]
    assert sorted(logged) == [0, 1]
    assert_allclose([logged[0], logged[1]], pruned_run["history"]["sparsity"], atol=1e-6)


@pytest.mark.parametrize("scope", ["layer", pytest.param("global", marks=pytest.mark.tensorflow_backend)])
def test_a_higher_target_in_either_scope(model, scope):
    history = fit(model, epochs=1, callbacks=[kbert.MagnitudePruning(0.8, frequency=3, scope=scope)])
    report = kbert.compression.sparsity(model)
    assert history.history["sparsity"][-1] == pytest.approx(report["sparsity"])
    if scope == "layer":
        for kernel in kernels(model):
            assert abs(np.mean(kernel == 0) - 0.8) <= 1 / kernel.size
    else:  # one threshold: the kernels' sparsities differ, the overall one is the target
        assert abs(report["sparsity"] - 0.8) <= 1 / report["total"]
        assert len(set(zero_fractions(model))) > 1


@pytest.mark.parametrize("scope", [pytest.param("layer", marks=pytest.mark.tensorflow_backend), "global"])
def test_the_target_holds_after_a_last_update_that_prunes_nothing_more(model, scope):
    # With an update every step, the cubic schedule reaches the target's
    # count (rounded) before its last step: that last update prunes no more
    # weights, yet must still zero what the last optimizer step moved.
    fit(model, epochs=3, callbacks=[kbert.MagnitudePruning(0.5, frequency=1, scope=scope)])
    assert kbert.compression.sparsity(model)["sparsity"] == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("scope", ["layer", "global"])
def test_the_smallest_weights_are_the_ones_removed(model, scope):
    before = kernels(model)
    report = kbert.MagnitudePruning.prune(model, 0.6, scope=scope)
    after = kernels(model)
    if scope == "layer":
        for old, new in zip(before, after):
            smallest = np.argsort(np.abs(old).ravel(), kind="stable")[: round(0.6 * old.size)]
            expected = old.ravel().copy()
            expected[smallest] = 0
            assert_array_equal(new.ravel(), expected)
    else:
        magnitudes = np.concatenate([np.abs(k).ravel() for k in before])
        threshold = np.sort(magnitudes)[round(0.6 * magnitudes.size) - 1]
        for old, new in zip(before, after):
            assert_array_equal(new, np.where(np.abs(old) <= threshold, 0, old))
    smallest_kernel = min(kernel.size for kernel in before)
    assert abs(report["sparsity"] - 0.6) <= 1 / smallest_kernel
    assert model.keep_sparsity


def test_pruning_continues_from_the_sparsity_present(model):
    kbert.MagnitudePruning.prune(model, 0.3)
    first_zeros = [kernel == 0 for kernel in kernels(model)]
    recorder = RecordZeros()
    fit(model, epochs=1, callbacks=[kbert.MagnitudePruning(0.6, frequency=1), recorder])
    for zeros in recorder.zeros:
        for was_zero, now_zero in zip(first_zeros, zeros):
            assert np.all(now_zero[was_zero])
    fractions = [np.mean(np.concatenate([z.ravel() for z in zeros])) for zeros in recorder.zeros]
    assert fractions[0] >= 0.3 and fractions == sorted(fractions)
    assert fractions[-1] == pytest.approx(0.6, abs=1e-3)


def test_sparsity_survives_training_saving_loading_and_export(model, tmp_path):
    kbert.MagnitudePruning.prune(model, 0.5)
    zeros = [kernel == 0 for kernel in kernels(model)]
    before = kernels(model)

    history = fit(model, epochs=1)  # plain fit, no callback: the model keeps its zeros
    assert history.history["sparsity"] == pytest.approx([0.5], abs=1e-3)
    for kernel, was_zero, old in zip(kernels(model), zeros, before):
        assert np.all(kernel[was_zero] == 0)
        assert not np.allclose(kernel[~was_zero], old[~was_zero])  # the others trained

    path = str(tmp_path / "pruned.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.keep_sparsity
    fit(restored, epochs=1)
    for kernel, was_zero in zip(kernels(restored), zeros):
        assert np.all(kernel[was_zero] == 0)
    assert kbert.compression.sparsity(restored)["sparsity"] == pytest.approx(0.5, abs=1e-3)

    if BACKEND != "tensorflow":
        return  # another backend's export: tests/backend
    exported = kbert.export(restored, str(tmp_path / "export"))
    reader = tf.train.load_checkpoint(os.path.join(exported, "variables", "variables"))
    saved = [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()]
    saved = [value for value in saved if isinstance(value, np.ndarray)]
    for kernel in kernels(restored):
        assert any(value.shape == kernel.shape and np.array_equal(value, kernel) for value in saved)
        assert np.mean(kernel == 0) == pytest.approx(0.5, abs=1e-3)
    served = tf.saved_model.load(exported).signatures["serving_default"](text=tf.constant(TEXTS[:2]))
    assert_allclose(numpy(served["probabilities"]), restored.predict_proba(TEXTS[:2], verbose=0),
                               atol=1e-5)


def test_rewinding_keeps_the_mask_and_the_weights_before_fit(model):
    start = model.get_weights()
    start_kernels = kernels(model)
    fit(model, epochs=1, callbacks=[kbert.MagnitudePruning(0.5, frequency=2, rewind=True)])
    for kernel, old in zip(kernels(model), start_kernels):
        pruned = kernel == 0
        assert abs(pruned.mean() - 0.5) <= 1 / kernel.size
        assert_array_equal(kernel[~pruned], old[~pruned])
    # Every other weight is back at its start too.
    kernel_count = sum(1 for _ in prunable_kernels(model.encoder))
    rewound = model.get_weights()
    assert sum(np.array_equal(a, b) for a, b in zip(rewound, start)) == len(start) - kernel_count
    # The next fit retrains the sub-network only.
    mask = [kernel == 0 for kernel in kernels(model)]
    fit(model, epochs=1)
    for kernel, pruned in zip(kernels(model), mask):
        assert np.all(kernel[pruned] == 0)


def test_rewinding_to_given_weights(model, tmp_path):
    other = tiny_classifier(sequence_length=8)
    weights_file, model_file = str(tmp_path / "start.weights.h5"), str(tmp_path / "start.keras")
    other.save_weights(weights_file)
    other.save(model_file)
    iterations = int(model.optimizer.iterations)
    for rewind_to in (other.get_weights(), weights_file, model_file):
        fit(model, epochs=1, callbacks=[kbert.MagnitudePruning(0.5, frequency=4, rewind_to=rewind_to)])
        for kernel, target in zip(kernels(model), kernels(other)):
            kept = kernel != 0
            assert_array_equal(kernel[kept], target[kept])
            assert abs(np.mean(~kept) - 0.5) <= 1 / kernel.size
    # The optimizer's own state was not rewound.
    assert int(model.optimizer.iterations) == iterations + 3 * 4


def test_a_pretrainer_is_pruned_and_keeps_its_zeros():
    pretrainer = kbert.Pretrainer(kbert.Encoder(**tiny_encoder_kwargs()), objective="none")
    kbert.MagnitudePruning.prune(pretrainer, 0.5)
    restored = kbert.Pretrainer.from_config(pretrainer.get_config())
    assert restored.keep_sparsity and restored.get_config() == pretrainer.get_config()
    restored.set_weights(pretrainer.get_weights())
    zeros = [kernel == 0 for kernel in kernels(restored)]
    x = {
        "token_ids": np.array([[2, 5, 4, 7, 3, 8, 4, 3]] * 2),
        "segment_ids": np.zeros((2, 8), "int32"),
        "padding_mask": np.ones((2, 8), "int32"),
        "mask_positions": np.array([[2, 6]] * 2),
    }
    restored.fit(x, {"mlm": np.array([[7, 9]] * 2)}, epochs=2, verbose=0)
    for kernel, was_zero in zip(kernels(restored), zeros):
        assert np.all(kernel[was_zero] == 0) and np.mean(was_zero) == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("arguments, message", [
    ({"target_sparsity": 1.0}, "`target_sparsity` must be in \\[0, 1\\), got 1.0"),
    ({"target_sparsity": -0.1}, "got -0.1"),
    ({"target_sparsity": 0.5, "begin_step": 10, "end_step": 10}, "`end_step` \\(10\\) must come after"),
    ({"target_sparsity": 0.5, "frequency": 0}, "`frequency` must be an integer of at least 1, got 0"),
    ({"target_sparsity": 0.5, "scope": "block"}, "`scope` must be one of .* got 'block'"),
])
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        kbert.MagnitudePruning(**arguments)


def test_a_missing_rewind_file_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file"):
        kbert.MagnitudePruning(0.5, rewind_to=str(tmp_path / "missing.keras"))


def test_a_model_without_an_encoder_is_refused():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile("sgd", loss="mse")
    with pytest.raises(TypeError, match="a model with one as `.encoder`.*got Functional"):
        model.fit(np.zeros((4, 3)), np.zeros(4), callbacks=[kbert.MagnitudePruning(0.5)], verbose=0)


def test_a_begin_step_after_the_fit_is_refused(model):
    with pytest.raises(ValueError, match="`begin_step` \\(20\\) is not before the last step of this fit \\(4\\)"):
        fit(model, epochs=1, callbacks=[kbert.MagnitudePruning(0.5, begin_step=20)])
