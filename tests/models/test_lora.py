"""LoRA fine-tuning of task models: what trains, what stays, what a file keeps, what a merge serves."""

import keras
import numpy as np
import pytest

import kbert
from kbert.models.optimization import default_learning_rate
from tests.test_case import numpy, tiny_classifier, tiny_encoder_kwargs

pytestmark = pytest.mark.all_backends

TEXTS = ["the cat sat on the mat", "a good film", "free prize now", "see you soon", "the dog sat", "a bad film"]
LABELS = [0, 1, 1, 0, 0, 1]


def values(variables):
    return [numpy(v).copy() for v in variables]


def lora_classifier(rank=2, **options):
    keras.utils.set_random_seed(1)
    model = tiny_classifier(dropout=0.0)
    model.enable_lora(rank, **options)
    return model


def test_the_encoder_is_frozen_but_its_adapters_and_pooler():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    encoder.enable_lora(2, targets=["query", "value", "intermediate"])
    trained = {v.path.split("/")[-2] + "/" + v.path.split("/")[-1] for v in encoder.trainable_variables}
    assert trained == {"transformer_layer_0/query_lora_a", "transformer_layer_0/query_lora_b",
                       "transformer_layer_0/value_lora_a", "transformer_layer_0/value_lora_b",
                       "transformer_layer_0/intermediate_lora_a", "transformer_layer_0/intermediate_lora_b",
                       "transformer_layer_1/query_lora_a", "transformer_layer_1/query_lora_b",
                       "transformer_layer_1/value_lora_a", "transformer_layer_1/value_lora_b",
                       "transformer_layer_1/intermediate_lora_a", "transformer_layer_1/intermediate_lora_b",
                       "pooler_dense/kernel", "pooler_dense/bias"}
    assert len(encoder.lora_adapters) == 12
    with pytest.raises(ValueError, match="LoRA adapters already"):
        encoder.enable_lora(2)
    albert = kbert.Encoder(**tiny_encoder_kwargs(architecture="albert"))
    with pytest.raises(ValueError, match="ALBERT whose layers share them"):
        albert.enable_lora(2)


def test_fit_trains_adapters_and_head_and_leaves_every_frozen_weight_as_it_was():
    model = lora_classifier()
    trained_ids = {id(v) for v in model.trainable_variables}
    frozen = [v for v in model.weights if id(v) not in trained_ids]
    frozen_before, trained_before = values(frozen), values(model.trainable_variables)
    model.fit(TEXTS, LABELS, epochs=2, batch_size=3, verbose=0)
    for before, variable in zip(frozen_before, frozen):
        np.testing.assert_array_equal(numpy(variable), before, err_msg=variable.path)
    changed = [not np.array_equal(numpy(v), b) for v, b in zip(model.trainable_variables, trained_before)]
    assert all(changed), [v.path for v, c in zip(model.trainable_variables, changed) if not c]
    # The optimizer keeps two slots for each trained variable, none for the frozen ones.
    slots = sorted(tuple(v.shape) for v in model.optimizer.variables if len(v.shape) > 0)
    assert slots == sorted(2 * [tuple(v.shape) for v in model.trainable_variables])
    with pytest.raises(ValueError, match="trained already"):
        model.enable_lora(2)


def test_lora_learns_at_a_higher_rate():
    base = default_learning_rate(768, lora=True)
    assert base == pytest.approx(75 * default_learning_rate(768)) and base == pytest.approx(3.75e-3)
    assert default_learning_rate(384, lora=True) == pytest.approx(5e-3)  # all-MiniLM-L6-v2: 75 x 7.1e-5, at most 5e-3
    assert default_learning_rate(64, lora=True) == pytest.approx(5e-3)  # 75 x 2e-4, at most 5e-3
    model = lora_classifier()
    schedule = model.optimizer._learning_rate  # kbert's warm-up schedule (`WarmupLinearDecay`)
    assert schedule.peak_learning_rate == pytest.approx(default_learning_rate(model.encoder.hidden_dim, lora=True))


def test_a_keras_file_keeps_the_adapters_as_they_are_and_training_goes_on(tmp_path):
    model = lora_classifier(targets=["query", "value", "output"])
    model.fit(TEXTS, LABELS, epochs=1, batch_size=3, verbose=0)
    path = tmp_path / "lora.keras"
    model.save(path)
    loaded = kbert.load_model(path)
    assert loaded.encoder.lora == model.encoder.lora
    # Unlike Keras' own `Dense` LoRA, which folds the update into the kernel and zeroes the adapters.
    for got, expected in zip(loaded.encoder.lora_adapters, model.encoder.lora_adapters):
        np.testing.assert_array_equal(numpy(got), numpy(expected))
    np.testing.assert_allclose(loaded.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=1e-6)
    assert [v.path for v in loaded.trainable_variables] == [v.path for v in model.trainable_variables]
    a, b = loaded.encoder.transformer_layers[0].lora_adapters["output"]
    before = numpy(b).copy()
    loaded.fit(TEXTS, LABELS, epochs=1, batch_size=3, verbose=0)
    assert not np.array_equal(numpy(b), before)


def test_merging_serves_the_same_scores_from_a_plain_encoder():
    model = lora_classifier(targets=["key", "attention_output", "intermediate"], alpha=4)
    rng = np.random.default_rng(0)
    for block in model.encoder.transformer_layers:
        for _, b in block.lora_adapters.values():  # fresh, B is zero: the update would be nothing
            b.assign(rng.normal(scale=0.2, size=b.shape).astype("float32"))
    merged = model.merge_lora()
    assert merged.encoder.lora is None and not merged.encoder.lora_adapters
    np.testing.assert_allclose(merged.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=1e-5)
    plain = tiny_classifier(dropout=0.0)
    assert merged.count_params() == plain.count_params()
    assert model.count_params() > plain.count_params()
    assert plain.merge_lora() is plain


def test_what_cannot_hold_adapters_asks_for_the_merged_model(tmp_path):
    model = lora_classifier()
    for write, what in ((lambda: kbert.save_pretrained(model, model.preprocessor.tokenizer, tmp_path / "hf"),
                         "BERT and ALBERT checkpoints cannot hold"),
                        (lambda: model.encoder.to_keras_hub(), "convert `model.merge_lora"),
                        (lambda: kbert.prune_heads(model, {0: [1]}), "prune the heads of `model.merge_lora"),
                        (lambda: kbert.MagnitudePruning.prune(model, 0.5), "prune `model.merge_lora")):
        with pytest.raises(ValueError, match=what):
            write()
    assert not (tmp_path / "hf").exists()
    kbert.prune_heads(model.merge_lora(), {0: [1]})
