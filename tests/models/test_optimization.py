import keras
import numpy as np
import pytest

import kbert
from kbert.models.optimization import BertAdamW, WarmupLinearDecay, bert_adamw
from tests.test_case import BACKEND, tiny_encoder_kwargs

# The schedule and the optimizer are backend code (kbert.backend.AdamW): all of it runs on every backend.
pytestmark = pytest.mark.all_backends


def rates(schedule, steps):
    return np.array([float(schedule(step)) for step in steps])


def test_warms_up_then_decays_linearly_to_zero():
    schedule = WarmupLinearDecay(1.0, total_steps=100, warmup_fraction=0.1)
    r = rates(schedule, [0, 4, 9, 10, 55, 99, 100, 150])
    np.testing.assert_allclose(r[:3], [0.1, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(r[3], 1.0, atol=1e-6)
    np.testing.assert_allclose(r[4], 0.5, atol=1e-6)
    assert 0 < r[5] < 0.02 and r[6] == 0 and r[7] == 0


def test_new_window_restarts_the_cycle_without_a_new_schedule():
    schedule = WarmupLinearDecay(2.0, total_steps=10)
    schedule.set_window(start_step=50, total_steps=20)
    np.testing.assert_allclose(rates(schedule, [50, 51, 60]), [1.0, 2.0, 2.0 * 10 / 18], atol=1e-6)


def test_without_total_steps_the_rate_stays_at_peak():
    schedule = WarmupLinearDecay(3e-4)
    np.testing.assert_allclose(rates(schedule, [0, 1000]), [3e-4, 3e-4], rtol=1e-6)


@pytest.mark.parametrize("window", [dict(total_steps=37, warmup_fraction=0.1, start_step=5),
                                    dict(total_steps=100, warmup_fraction=0.3, steps_per_update=3),
                                    dict(total_steps=None), dict(total_steps=1)])
def test_the_rate_computed_on_the_host_is_the_backends(window):
    schedule = WarmupLinearDecay(3e-4, **window)
    steps = range(-2, 130)
    host = [schedule.rate_at(step) for step in steps]
    assert host == [float(keras.ops.convert_to_numpy(schedule(step))) for step in steps]
    moved = (2, 50, 1)  # a window as the variables may hold it after a restore
    schedule.set_window(*moved)
    assert [schedule.rate_at(step) for step in steps] == [
        float(keras.ops.convert_to_numpy(schedule(step))) for step in steps]
    assert WarmupLinearDecay(3e-4, **window).rate_at(60, moved) == schedule.rate_at(60)


def test_config_round_trip_keeps_the_window():
    schedule = WarmupLinearDecay(1e-3, total_steps=40, warmup_fraction=0.2, start_step=7)
    restored = WarmupLinearDecay(**schedule.get_config())
    assert restored.get_config() == schedule.get_config()
    np.testing.assert_allclose(rates(restored, range(0, 60, 5)), rates(schedule, range(0, 60, 5)))


@pytest.mark.parametrize("name, excluded", [("dense/kernel", False), ("dense/bias", True), ("layer_norm/gamma", True)])
def test_adamw_skips_weight_decay_on_biases_and_layer_norm(name, excluded):
    optimizer = BertAdamW.from_config(bert_adamw(1e-4).get_config())
    variable = keras.Variable(np.ones(3), name=name.split("/")[1])
    variable._path = name  # what Keras matches the exclusions against
    assert optimizer._use_weight_decay(variable) is not excluded


@pytest.mark.parametrize("gradient_accumulation_steps", [None, 2])
def test_adamw_updates_as_keras_adamw_does(gradient_accumulation_steps):
    """kbert's update (TensorFlow's one kernel, PyTorch's fused one) gives keras' weights and moments, step after step."""
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=(3,)).astype("float32"),
             rng.normal(size=(7, 3)).astype("float32")]
    names = ["kernel", "bias", "embeddings"]
    settings = dict(learning_rate=WarmupLinearDecay(1e-2, total_steps=10), weight_decay=0.1, epsilon=1e-6,
                    global_clipnorm=1.0, gradient_accumulation_steps=gradient_accumulation_steps)
    fused = BertAdamW(**settings)
    reference = keras.optimizers.AdamW(**settings)
    reference.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    runs = []
    for optimizer in (fused, reference):
        variables = [keras.Variable(w, name=n) for w, n in zip(start, names)]
        for step in range(4):
            gradients = [keras.ops.convert_to_tensor(rng_step.normal(size=w.shape).astype("float32"))
                         for rng_step in [np.random.default_rng(step)] for w in start]
            if BACKEND == "tensorflow":
                import tensorflow as tf

                # The embedding's gradient arrives as rows, as a lookup's does.
                gradients[2] = tf.IndexedSlices(gradients[2][:2], tf.constant([1, 4]), tf.constant([7, 3]))
            optimizer.apply_gradients(zip(gradients, variables))
        runs.append([v.numpy() for v in variables + optimizer._momentums + optimizer._velocities])
    for got, expected in zip(*runs):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(runs[0][0], start[0])


def test_the_window_is_optimizer_state_but_not_saved():
    """A compiled step reads the window as the optimizer's state; `.keras` files keep it in the config."""
    optimizer = bert_adamw(1e-3)
    schedule = optimizer._learning_rate
    assert all(any(v is w for w in optimizer.variables) for v in schedule.variables)
    variables = [keras.Variable(np.ones((2, 2), "float32"), name="kernel")]
    optimizer.build(variables)
    store = {}
    optimizer.save_own_variables(store)
    assert len(store) == len(optimizer.variables) - len(schedule.variables)
    restored = bert_adamw(1e-3)
    restored.build(variables)
    restored.load_own_variables(store)
    for saved, loaded in zip([v for v in optimizer.variables if not any(v is w for w in schedule.variables)],
                             [v for v in restored.variables if not any(v is w for w in restored._learning_rate.variables)]):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(saved), keras.ops.convert_to_numpy(loaded))


def test_a_float16_model_trains_with_loss_scaling():
    """Under `mixed_float16` `compile` wraps the optimizer in loss scaling, and the step updates the weights."""
    if BACKEND == "jax":
        pytest.skip("XLA on the CPU has no float16 matrix product")
    keras.utils.set_random_seed(0)
    encoder = kbert.Encoder(**tiny_encoder_kwargs(), dtype="mixed_float16")
    model = kbert.Classifier(encoder, num_classes=2)
    model.compile()
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(model.optimizer.inner_optimizer, BertAdamW)
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, 20, size=(8, 12)).astype("int32")
    inputs = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
              "padding_mask": np.ones_like(token_ids, dtype=bool)}
    before = keras.ops.convert_to_numpy(model.output_dense.kernel)
    history = model.fit(inputs, np.arange(8) % 2, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert model.output_dense.compute_dtype == "float16"
    assert not np.allclose(keras.ops.convert_to_numpy(model.output_dense.kernel), before)


@pytest.mark.parametrize("learning_rate", [0, -1e-3, float("nan"), float("inf")])
def test_a_learning_rate_that_cannot_train_is_refused(learning_rate):
    # A negative rate trains by gradient ascent and NaN gives a NaN model, silently.
    with pytest.raises(ValueError, match="`learning_rate` must be a finite number above 0"):
        bert_adamw(learning_rate)


def test_compile_takes_a_zero_learning_rate_as_given_not_as_the_default():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    model = kbert.Classifier(encoder, num_classes=2)
    with pytest.raises(ValueError, match="got 0"):
        model.compile(learning_rate=0)
    model.compile(learning_rate=None)  # the default for the encoder's width
    assert model.optimizer._learning_rate.peak_learning_rate == pytest.approx(
        kbert.models.optimization.default_learning_rate(16))


@pytest.mark.tensorflow_backend  # JAX and PyTorch build the optimizer, metrics and losses first themselves
@pytest.mark.parametrize("task", ["classifier", "pretrainer", "layerwise-distiller"])
def test_fit_traces_the_training_step_once_and_frees_it_with_the_model(task, tmp_path):
    import gc
    import weakref

    from tensorflow.python.framework.func_graph import FuncGraph

    from tests.test_case import TINY_VOCABULARY

    def live_graphs():
        gc.collect()
        return sum(isinstance(o, FuncGraph) for o in gc.get_objects())

    before = live_graphs()
    packer = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length=8)
    if task == "classifier":
        model = kbert.Classifier(kbert.Encoder(**tiny_encoder_kwargs()), num_classes=2,
                                 preprocessor=kbert.ClassifierPreprocessor(packer, num_classes=2))
        model.compile()
    elif task == "pretrainer":  # two outputs: a loss tracker for each, made while tracing
        model = kbert.Pretrainer(kbert.Encoder(**tiny_encoder_kwargs()))
        model.compile()
        for i in range(2):
            (tmp_path / f"doc{i}.txt").write_text("the cat sat on the mat .\na dog sat .\n" * 3)
        data = kbert.pretraining_dataset(str(tmp_path / "*.txt"), vocabulary=TINY_VOCABULARY,
                                         sequence_length=12, batch_size=2, seed=0, verbose=False)
    else:
        model = kbert.LayerwiseDistiller(kbert.Encoder(**tiny_encoder_kwargs()),
                                         kbert.Encoder(**tiny_encoder_kwargs()), preprocessor=packer)
    traces = []
    train_step = model.train_step

    def counted_train_step(*args):
        traces.append(1)  # in graph mode the step's Python runs only while it is traced
        return train_step(*args)

    model.train_step = counted_train_step
    if task == "classifier":
        model.fit(["the cat", "a dog"], [0, 1], batch_size=2, epochs=2, verbose=0)
    elif task == "pretrainer":
        model.fit(data, epochs=2, verbose=0)
        del data
    else:
        model.fit(["the cat", "a dog"], batch_size=2, epochs=2, verbose=0)
    # Optimizer variables made inside the trace would make TensorFlow trace the step twice.
    assert len(traces) == 1
    assert model.optimizer.built
    gone = weakref.ref(model)
    del model, train_step, counted_train_step
    keras.backend.clear_session(free_memory=True)
    assert gone() is None
    # TensorFlow itself keeps one graph of a fit; each optimizer variable made in
    # the trace would keep a graph of its own (132 for this tiny encoder).
    assert live_graphs() - before <= 1
