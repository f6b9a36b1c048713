import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.models.optimization import WarmupLinearDecay
from kbert.pretraining.pretrainer import (
    NEXT_SENTENCE_LABELS,
    SENTENCE_ORDER_LABELS,
    Pretrainer,
    default_pretraining_learning_rate,
)
from tests.test_case import (
    assert_all_close,
    assert_allclose,
    assert_array_equal,
    dtype,
    numpy,
    run_config_round_trip,
    run_precision_test,
    tiny_encoder_kwargs,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

VOCABULARY_SIZE = 27
LOG_NAMES = ["loss", "mlm_accuracy", "mlm_loss", "nsp_accuracy", "nsp_loss"]
SOP_LOG_NAMES = ["loss", "mlm_accuracy", "mlm_loss", "sop_accuracy", "sop_loss"]


def tiny_pretrainer(next_sentence=True, **encoder_kwargs):
    encoder = kbert.Encoder(**{**tiny_encoder_kwargs(), **encoder_kwargs})
    return Pretrainer(encoder, next_sentence=next_sentence)


def tiny_albert_pretrainer(**encoder_kwargs):
    """SOP on a tiny ALBERT: embeddings narrower than the hidden size, one shared block."""
    encoder = kbert.Encoder(**{**tiny_encoder_kwargs(), "embedding_size": 8, "num_groups": 1,
                               "activation": "gelu_approximate", **encoder_kwargs})
    return Pretrainer(encoder, objective="sop")


def as_sop(y, sample_weight):
    """The batch's pair labels as sentence-order labels."""
    return ({"mlm": y["mlm"], "sop": y["nsp"]}, {"mlm": sample_weight["mlm"], "sop": sample_weight["nsp"]})


def pretraining_batch(batch=4, length=10, predictions=3, seed=0):
    """A hand-made `(x, y, sample_weight)` batch; the last row has one real prediction."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, VOCABULARY_SIZE, (batch, length)).astype("int32")
    token_ids[:, 0], token_ids[:, length // 2], token_ids[:, -1] = 2, 3, 3
    segment_ids = np.zeros((batch, length), "int32")
    segment_ids[:, length // 2 + 1 :] = 1
    padding_mask = np.ones((batch, length), "int32")
    padding_mask[-1, -2:] = 0
    token_ids[-1, -2:] = 0
    segment_ids[-1, -2:] = 0
    mask_positions = np.stack(
        [rng.choice(np.arange(1, length // 2), predictions, replace=False) for _ in range(batch)]
    ).astype("int32")
    labels = np.take_along_axis(token_ids, mask_positions, axis=1)
    token_ids[np.arange(batch)[:, None], mask_positions] = 4  # [MASK]
    weights = np.ones((batch, predictions), "float32")
    mask_positions[-1, 1:], labels[-1, 1:], weights[-1, 1:] = 0, 0, 0.0  # padded predictions
    x = {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "mask_positions": mask_positions,
    }
    y = {"mlm": labels.astype("int32"), "nsp": (np.arange(batch) % 2).astype("int32")}
    sample_weight = {"mlm": weights, "nsp": np.ones(batch, "float32")}
    return x, y, sample_weight


def mlm_only(y, sample_weight):
    return {"mlm": y["mlm"]}, {"mlm": sample_weight["mlm"]}


def cross_entropy(logits, labels):
    logits = logits - logits.max(-1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probabilities, labels[..., None], -1)[..., 0]


def test_outputs_are_float32_logits_of_both_heads():
    model = tiny_pretrainer()
    x, _, _ = pretraining_batch()
    outputs = model(x)
    assert set(outputs) == {"mlm", "nsp"}
    assert outputs["mlm"].shape == (4, 3, VOCABULARY_SIZE)
    assert outputs["nsp"].shape == (4, 2)
    assert dtype(outputs["mlm"]) == dtype(outputs["nsp"]) == "float32"
    assert set(model.input) == {"token_ids", "segment_ids", "padding_mask", "mask_positions"}
    assert NEXT_SENTENCE_LABELS == ("IsNext", "NotNext")
    # The number of predictions per sequence is free.
    x["mask_positions"] = x["mask_positions"][:, :1]
    assert model(x)["mlm"].shape == (4, 1, VOCABULARY_SIZE)


def test_mlm_logits_are_read_at_the_mask_positions():
    model = tiny_pretrainer(dropout=0.0)
    x, _, _ = pretraining_batch()
    logits = numpy(model(x)["mlm"])
    swapped = dict(x, mask_positions=x["mask_positions"][:, ::-1])
    assert_allclose(numpy(model(swapped)["mlm"]), logits[:, ::-1], atol=1e-5)


def test_without_next_sentence_there_is_only_the_mlm_output():
    model = tiny_pretrainer(next_sentence=False)
    x, y, sample_weight = pretraining_batch()
    outputs = model(x)
    assert set(outputs) == {"mlm"}
    assert model.next_sentence_head is None
    assert not any("next_sentence" in w.path for w in model.weights)
    y, sample_weight = mlm_only(y, sample_weight)
    pooler = [numpy(w) for w in model.encoder.pooler_dense.weights]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(x, y, sample_weight=sample_weight, batch_size=2, epochs=3, verbose=0)
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    assert sorted(history.history) == ["loss", "mlm_accuracy"]
    # With arrays, the learning-rate window is the batches they make.
    assert model.optimizer._learning_rate.get_config()["total_steps"] == 6
    # Nothing reads the pooler without next-sentence prediction: it is not trained.
    for before, after in zip(pooler, model.encoder.pooler_dense.weights):
        assert_array_equal(before, numpy(after))
    with_nsp = tiny_pretrainer()
    assert len(with_nsp.trainable_weights) == len(model.trainable_weights) + 2 + 2  # NSP head, pooler


def test_output_projection_is_tied_to_the_token_embedding():
    model = tiny_pretrainer(dropout=0.0)
    encoder = model.encoder
    hidden, vocabulary = encoder.hidden_dim, encoder.vocabulary_size
    embeddings = encoder.token_embedding.embeddings
    # The head's own weights: dense + LayerNorm + output bias, no [V, H] matrix.
    own = [w for w in model.masked_lm_head.trainable_weights if w is not embeddings]
    assert sorted(tuple(w.shape) for w in own) == sorted(
        [(hidden, hidden), (hidden,), (hidden,), (hidden,), (vocabulary,)]
    )
    # The model's weights are the encoder's, the head's and the NSP dense layer's.
    assert len(model.trainable_weights) == len(encoder.trainable_weights) + len(own) + 2
    # Changing the token embedding changes the MLM logits (and not only
    # through the encoder's input: keep the inputs' embeddings as they were).
    x, _, _ = pretraining_batch()
    before = numpy(model(x)["mlm"])
    encoder_inputs = {name: x[name] for name in encoder.input}
    encoded = numpy(encoder(encoder_inputs)["sequence_output"])
    unused = np.setdiff1d(np.arange(vocabulary), x["token_ids"])
    assert unused.size
    new = numpy(embeddings)
    # (Not a constant shift: the head's LayerNorm output sums to about 0.)
    new[unused] += np.random.default_rng(1).normal(size=(unused.size, hidden))
    embeddings.assign(new)
    after = numpy(model(x)["mlm"])
    assert_allclose(numpy(encoder(encoder_inputs)["sequence_output"]), encoded)
    changed = np.abs(after - before).max(axis=(0, 1)) > 1e-4
    assert changed[unused].all() and not changed[np.setdiff1d(np.arange(vocabulary), unused)].any()


def test_loss_is_the_mean_over_real_predictions_plus_nsp():
    model = tiny_pretrainer()
    x, y, sample_weight = pretraining_batch()
    results = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
    outputs = model(x)
    weights = sample_weight["mlm"]
    mlm_losses = cross_entropy(numpy(outputs["mlm"]), y["mlm"])
    expected_mlm = (mlm_losses * weights).sum() / weights.sum()
    expected_nsp = cross_entropy(numpy(outputs["nsp"]), y["nsp"]).mean()
    assert_allclose(results["mlm_loss"], expected_mlm, rtol=1e-5)
    assert_allclose(results["nsp_loss"], expected_nsp, rtol=1e-5)
    assert_allclose(results["loss"], expected_mlm + expected_nsp, rtol=1e-5)
    # Accuracy counts real predictions only.
    correct = numpy(outputs["mlm"]).argmax(-1) == y["mlm"]
    assert_allclose(
        results["mlm_accuracy"], (correct * weights).sum() / weights.sum(), rtol=1e-6
    )
    # A label on a padded prediction (weight 0) changes nothing.
    relabelled = {"mlm": y["mlm"].copy(), "nsp": y["nsp"]}
    relabelled["mlm"][-1, 1:] = 7
    again = model.evaluate(x, relabelled, sample_weight=sample_weight, verbose=0, return_dict=True)
    assert_allclose(again["loss"], results["loss"], rtol=1e-6)
    assert_allclose(again["mlm_accuracy"], results["mlm_accuracy"], rtol=1e-6)
    # ... while one on a real prediction does.
    relabelled["mlm"][0, 0] = (y["mlm"][0, 0] + 1) % VOCABULARY_SIZE
    changed = model.evaluate(x, relabelled, sample_weight=sample_weight, verbose=0, return_dict=True)
    expected_change = (mlm_losses[0, 0] - cross_entropy(numpy(outputs["mlm"])[:1, :1], relabelled["mlm"][:1, :1])[0, 0])
    assert_allclose(results["loss"] - changed["loss"], expected_change / weights.sum(), atol=1e-6)
    assert changed["loss"] != results["loss"]


def test_fit_lowers_the_loss_and_logs_both_heads():
    model = tiny_pretrainer()
    model.compile(learning_rate=3e-3)
    x, y, sample_weight = pretraining_batch()
    before = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
    dataset = tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(10)
    history = model.fit(dataset, epochs=3, verbose=0)
    assert sorted(history.history) == LOG_NAMES
    assert history.history["loss"][-1] < history.history["loss"][0]
    after = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
    assert after["mlm_loss"] < 0.85 * before["mlm_loss"], (before, after)
    assert after["mlm_accuracy"] > before["mlm_accuracy"]
    # This `fit` warmed up and decayed over its 30 steps.
    schedule = model.optimizer._learning_rate
    assert isinstance(schedule, WarmupLinearDecay)
    assert schedule.get_config() == {
        "peak_learning_rate": 3e-3, "total_steps": 30, "warmup_fraction": 0.1, "start_step": 0
    }
    assert int(model.optimizer.iterations) == 30


def test_lora_pretraining_trains_adapters_and_heads_and_leaves_the_encoder(tmp_path):
    model = tiny_pretrainer()
    model.enable_lora(2, targets=["query", "value", "intermediate"])
    assert model.optimizer._learning_rate.peak_learning_rate == pytest.approx(5e-3)  # 10 x 1e-3, at most 5e-3
    trained = {v.path for v in model.trainable_variables}
    adapters = {v.path for v in model.encoder.lora_adapters}
    heads = {v.path for v in model.weights if not v.path.startswith(("transformer_layer", "token_embedding",
                                                                      "position_embedding", "segment_embedding",
                                                                      "embeddings_layer_norm"))}
    assert adapters <= trained and trained - adapters <= heads
    frozen = [v for v in model.weights if v.path not in trained]
    before = [numpy(v).copy() for v in frozen]
    x, y, sample_weight = pretraining_batch()
    model.fit(tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(4), epochs=1, verbose=0)
    for variable, value in zip(frozen, before):
        np.testing.assert_array_equal(numpy(variable), value, err_msg=variable.path)
    path = tmp_path / "pretrainer.keras"
    model.save(path)
    again = kbert.load_model(path)
    assert {v.path for v in again.trainable_variables} == trained
    np.testing.assert_allclose(numpy(again(x)["mlm"]), numpy(model(x)["mlm"]), atol=1e-5)


def test_default_learning_rate_scales_with_width():
    assert default_pretraining_learning_rate(768) == pytest.approx(1e-4)
    assert default_pretraining_learning_rate(256) == pytest.approx(3e-4)
    assert default_pretraining_learning_rate(16) == pytest.approx(1e-3)
    model = tiny_pretrainer()
    assert model.optimizer._learning_rate.peak_learning_rate == pytest.approx(1e-3)
    model.compile(learning_rate=5e-4)
    assert model.optimizer._learning_rate.peak_learning_rate == pytest.approx(5e-4)


def test_compile_can_be_overridden():
    model = tiny_pretrainer()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss_weights={"mlm": 1.0, "nsp": 0.0})
    assert isinstance(model.optimizer, keras.optimizers.SGD)
    x, y, sample_weight = pretraining_batch()
    results = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
    assert_allclose(results["loss"], results["mlm_loss"], rtol=1e-6)


def test_config_round_trip():
    model = tiny_pretrainer(next_sentence=False)
    x, _, _ = pretraining_batch()
    restored = run_config_round_trip(model, x)
    assert restored.next_sentence is False
    assert restored.get_config()["encoder"]["config"]["hidden_dim"] == 16


def test_save_and_load_restore_outputs_and_optimizer(tmp_path):
    model = tiny_pretrainer()
    x, y, sample_weight = pretraining_batch()
    model.fit(x, y, sample_weight=sample_weight, batch_size=2, epochs=1, verbose=0)
    path = str(tmp_path / "pretrainer.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is Pretrainer
    assert_all_close(restored(x), model(x))
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations) == 2
    assert isinstance(restored.optimizer._learning_rate, WarmupLinearDecay)
    for saved, loaded in zip(model.optimizer.variables, restored.optimizer.variables):
        assert_allclose(numpy(saved), numpy(loaded))
    # Still tied after loading: one embedding matrix serves input and output.
    assert restored.masked_lm_head.token_embedding is restored.encoder.token_embedding
    history = restored.fit(x, y, sample_weight=sample_weight, batch_size=2, verbose=0)
    assert sorted(history.history) == LOG_NAMES


def test_mixed_precision_gives_float32_logits():
    x, _, _ = pretraining_batch()
    run_precision_test(lambda policy: tiny_pretrainer(dtype=policy), x, float32_outputs=("mlm", "nsp"))
    assert tiny_pretrainer(dtype="mixed_bfloat16").masked_lm_head.compute_dtype == "bfloat16"


def test_sop_has_its_own_head_and_output_and_fits():
    model = tiny_albert_pretrainer()
    assert model.objective == "sop" and model.next_sentence is False
    assert model.next_sentence_head is None and model.sentence_order_head is not None
    assert SENTENCE_ORDER_LABELS == ("InOrder", "Swapped")
    x, y, sample_weight = pretraining_batch()
    outputs = model(x)
    assert set(outputs) == {"mlm", "sop"}
    assert tuple(outputs["sop"].shape) == (4, 2) and dtype(outputs["sop"]) == "float32"
    assert any(w.path.startswith("sentence_order_head") for w in model.trainable_weights)
    y, sample_weight = as_sop(y, sample_weight)
    results = model.evaluate(x, y, sample_weight=sample_weight, verbose=0, return_dict=True)
    expected_sop = cross_entropy(numpy(outputs["sop"]), y["sop"]).mean()
    assert_allclose(results["sop_loss"], expected_sop, rtol=1e-5)
    assert_allclose(results["loss"], results["mlm_loss"] + expected_sop, rtol=1e-5)
    model.compile(learning_rate=3e-3)
    pooler = [numpy(w) for w in model.encoder.pooler_dense.weights]
    dataset = tf.data.Dataset.from_tensors((x, y, sample_weight)).repeat(10)
    history = model.fit(dataset, epochs=2, verbose=0)
    assert sorted(history.history) == SOP_LOG_NAMES
    assert history.history["loss"][-1] < history.history["loss"][0]
    # The SOP head reads the pooled vector: the pooler trains.
    assert any(not np.array_equal(a, numpy(b)) for a, b in zip(pooler, model.encoder.pooler_dense.weights))


def test_masked_lm_head_of_an_albert_encoder_projects_to_the_embedding_size():
    # ALBERT's head: dense H -> E, GELU, LayerNorm over E, then the tied E x V decoder.
    model = tiny_albert_pretrainer(dropout=0.0)
    hidden, embedding, vocabulary = 16, 8, VOCABULARY_SIZE
    embeddings = model.encoder.token_embedding.embeddings
    assert tuple(embeddings.shape) == (vocabulary, embedding)
    own = {w.path: tuple(w.shape) for w in model.masked_lm_head.weights if w is not embeddings}
    assert sorted(own.values()) == sorted([(hidden, embedding), (embedding,), (embedding,),
                                           (embedding,), (vocabulary,)])
    assert model.masked_lm_head.token_embedding is model.encoder.token_embedding
    # The logits are the head's E-wide vectors times the embedding matrix, plus the bias.
    x, _, _ = pretraining_batch()
    head = model.masked_lm_head
    sequence = model.encoder({k: x[k] for k in model.encoder.input})["sequence_output"]
    gathered = keras.ops.take_along_axis(sequence, x["mask_positions"][..., None], axis=1)
    projected = numpy(head._intermediate_layer_norm(head._intermediate_dense(gathered)))
    assert projected.shape == (4, 3, embedding)
    expected = projected @ numpy(embeddings).T + numpy(head._bias)
    assert_allclose(numpy(model(x)["mlm"]), expected, atol=1e-5)


def test_sop_config_and_keras_round_trip(tmp_path):
    model = tiny_albert_pretrainer()
    x, y, sample_weight = pretraining_batch()
    y, sample_weight = as_sop(y, sample_weight)
    restored = run_config_round_trip(model, x)
    assert restored.objective == "sop" and restored.get_config()["objective"] == "sop"
    assert restored.encoder.embedding_size == 8 and restored.encoder.num_groups == 1
    model.fit(x, y, sample_weight=sample_weight, batch_size=2, epochs=1, verbose=0)
    path = str(tmp_path / "sop.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is Pretrainer and loaded.objective == "sop"
    assert_all_close(loaded(x), model(x))
    assert int(loaded.optimizer.iterations) == 2
    history = loaded.fit(x, y, sample_weight=sample_weight, batch_size=2, verbose=0)
    assert sorted(history.history) == SOP_LOG_NAMES


def test_objective_arguments():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    assert Pretrainer(encoder).objective == "nsp"
    assert Pretrainer(encoder, next_sentence=False).objective == "none"
    assert Pretrainer(encoder, objective="none").next_sentence is False
    with pytest.raises(ValueError, match="objective"):
        Pretrainer(encoder, objective="order")
    with pytest.raises(ValueError, match="contradicts"):
        Pretrainer(encoder, next_sentence=True, objective="sop")
    # Configs saved before objectives existed name `next_sentence`.
    config = Pretrainer(encoder, objective="none").get_config()
    del config["objective"]
    assert Pretrainer.from_config({**config, "next_sentence": False}).objective == "none"


def test_data_of_another_objective_is_refused_with_both_named():
    x, y, sample_weight = pretraining_batch()
    with pytest.raises(ValueError, match=r"targets \['mlm', 'nsp'\].*objective='sop'.*\['mlm', 'sop'\]"):
        tiny_albert_pretrainer().fit(x, y, sample_weight=sample_weight, verbose=0)
    dataset = tf.data.Dataset.from_tensors((x, *as_sop(y, sample_weight)))
    with pytest.raises(ValueError, match=r"objective='nsp'"):
        tiny_pretrainer().fit(dataset, verbose=0)


def test_refuses_what_is_not_an_encoder():
    with pytest.raises(TypeError, match="must be a kbert.Encoder, got Dense"):
        Pretrainer(keras.layers.Dense(3))


class _Interrupted(RuntimeError):
    pass


class _InterruptAtStep(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(numpy(self.model.optimizer.iterations)) == self.step:
            raise _Interrupted(f"interrupted after step {self.step}")


@pytest.mark.slow
# SOP differs from NSP in its data, not in backend code: its resume runs on TensorFlow only.
@pytest.mark.parametrize("feed, objective", [("repeated", "nsp"), ("arrays", "nsp"),
                                             pytest.param("repeated", "sop", marks=pytest.mark.tensorflow_backend)])
def test_a_resumed_fit_ends_at_the_step_of_an_uninterrupted_one(tmp_path, feed, objective):
    # Four distinct batches of two; dropout on. (tests/pretraining/test_pretrainer_runs.py
    # kills whole runs fed by pretraining datasets, finite or repeated.) SOP
    # runs on a tiny ALBERT.
    x, y, sample_weight = pretraining_batch(batch=8)
    if objective == "sop":
        y, sample_weight = as_sop(y, sample_weight)
    data = tf.data.Dataset.from_tensor_slices((x, y, sample_weight)).batch(2)
    fit_arguments = {
        "repeated": dict(x=data.repeat(), steps_per_epoch=3),
        "arrays": dict(x=x, y=y, sample_weight=sample_weight, batch_size=2, shuffle=False),
    }[feed]

    def new_model():
        keras.utils.set_random_seed(0)
        if objective == "sop":
            model = tiny_albert_pretrainer(vocabulary_size=VOCABULARY_SIZE, dropout=0.1)
        else:
            model = tiny_pretrainer(vocabulary_size=VOCABULARY_SIZE, dropout=0.1)
        model.compile(jit_compile=False)  # XLA would compile longer than these steps run
        return model

    def fit(model, backup_dir, *callbacks):
        backup = kbert.callbacks.BackupAndRestore(tmp_path / backup_dir, save_freq=2, verbose=False)
        model.fit(**fit_arguments, epochs=2, verbose=0, callbacks=[backup, *callbacks])
        return int(numpy(model.optimizer.iterations))

    straight = new_model()
    total = fit(straight, "straight")
    assert total == (6 if feed == "repeated" else 8)
    model = new_model()
    with pytest.raises(_Interrupted):
        fit(model, "interrupted", _InterruptAtStep(total - 1))
    # The same model object (a step past its backup) resumes from the backup.
    # The run ends at its last step, whatever the feed (not a whole epoch more).
    assert fit(model, "interrupted") == total
    if feed == "repeated":
        # A dataset continues at the batch after the backup: the same steps,
        # batches, learning rates and dropout masks as the uninterrupted run.
        for a, b in zip(straight.get_weights(), model.get_weights()):
            assert_array_equal(a, b)


def test_gradient_accumulation_updates_as_the_large_batch_does():
    x, y, sample_weight = pretraining_batch(batch=8, seed=3)
    sample_weight["mlm"][:] = 1.0  # both half batches have as many predictions

    def train(batch_size, accumulation, optimizer="auto"):
        keras.utils.set_random_seed(0)
        pretrainer = tiny_pretrainer(dropout=0.0)
        if optimizer == "sgd":
            optimizer = keras.optimizers.SGD(0.1, gradient_accumulation_steps=accumulation)
        pretrainer.compile(optimizer=optimizer, learning_rate=1e-2,
                           gradient_accumulation_steps=accumulation)
        pretrainer.fit(x, y, sample_weight=sample_weight, batch_size=batch_size, epochs=3,
                       shuffle=False, verbose=0)
        return pretrainer

    def largest_difference(a, b):
        return max(np.abs(u - v).max() for u, v in zip(a.get_weights(), b.get_weights()))

    # Plain gradient descent shows the updates themselves: the same.
    assert largest_difference(train(8, None, "sgd"), train(4, 2, "sgd")) < 1e-6

    large, accumulated, small = train(8, None), train(4, 2), train(4, None)
    # Three updates each; the accumulating run took six batches of half the size.
    assert int(numpy(large.optimizer.iterations)) == int(numpy(accumulated.optimizer.iterations)) == 3
    assert kbert.models.optimization.batches_trained(accumulated.optimizer) == 6
    # Warm-up and decay count updates: update u has the large batch's rate.
    for update in range(3):
        assert float(accumulated.optimizer._learning_rate(2 * update + 1)) == pytest.approx(
            float(large.optimizer._learning_rate(update)))
    # AdamW moves each weight by about the learning rate whatever the size of
    # its gradient, so float noise in near-zero gradients shows; still far
    # closer than six updates on the small batches.
    assert largest_difference(large, accumulated) < 1e-3 < largest_difference(large, small) / 10
