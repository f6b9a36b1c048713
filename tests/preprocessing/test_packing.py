"""Packed batches: several examples to a row, each computed as if it were alone."""

import keras
import numpy as np
import pytest

import kbert
from kbert.backend import gradient_function
from kbert.preprocessing.packing import pack_arrays, place_examples, row_width
from tests.test_case import TINY_VOCABULARY, numpy, tiny_classifier

# Texts and pairs of several lengths; the last is cut to the sequence length
# (16) and fills a row of its own.
TEXTS = ["a good film", "the cat sat on the mat", "bad", "free prize now !", "see you soon", "good",
         "the dog sat on the mat and the cat sat on the dog and a film now"]
PAIRS = (["the cat", "a film", "free prize", "the dog sat on the mat and the cat sat on the dog and a film", "bad",
          "see you"],
         ["sat on the mat", "good", "now !", "sat", "film", "soon"])


def test_examples_go_best_fit_longest_first():
    rows, offsets, count = place_examples([5, 3, 7, 2, 1], width=8)
    # 7 opens row 0, 5 row 1, 3 fills row 1, 2 opens row 2 (row 0 has 1 left), 1 fills row 0.
    assert count == 3
    assert rows.tolist() == [1, 1, 0, 2, 0]
    assert offsets.tolist() == [0, 5, 0, 0, 7]
    with pytest.raises(ValueError, match="An example of 9 tokens does not fit a row of 8"):
        place_examples([9], width=8)


def test_rows_are_as_wide_as_the_tokens_need_and_jax_gets_few_shapes():
    lengths = [3, 2, 4]
    ids = np.zeros((3, 8), "int32")
    mask = (np.arange(8) < np.array(lengths)[:, None]).astype("int32")
    packed = pack_arrays(ids + 7, ids, mask, max_width=64, compiles_each_shape=False)
    assert packed["token_ids"].shape == (1, 16)  # 9 tokens: one row, rounded up to 16
    assert packed["example_ids"][0].tolist() == [3] * 4 + [1] * 3 + [2] * 2 + [0] * 7
    assert packed["position_ids"][0, :9].tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1]
    assert packed["cls_positions"].tolist() == [4, 7, 0]  # in the examples' order
    assert (packed["padding_mask"] == (packed["example_ids"] > 0)).all()
    narrow = pack_arrays(ids + 7, ids, mask, max_width=4, compiles_each_shape=True)
    assert narrow["token_ids"].shape == (4, 4)  # three rows of 4, rounded up to a power of two
    assert not narrow["padding_mask"][3].any()
    assert row_width(9, compiles_each_shape=True) == 16 and row_width(3, compiles_each_shape=True) == 8


# Each backend's attention takes the packed rows' mask (texts, on every
# backend); what the heads do with the rows is keras.ops code, the same on
# all, tested on TensorFlow (pairs, tagging, question windows, choices).
@pytest.mark.parametrize("inputs", [pytest.param(TEXTS, marks=pytest.mark.all_backends), PAIRS],
                         ids=["texts", "pairs"])
def test_a_packed_batch_computes_each_example_as_alone_outputs_and_gradients(inputs):
    keras.utils.set_random_seed(0)
    model = tiny_classifier(sequence_length=16, dropout=0.0)
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.get_weights()])
    labels = np.arange(len(inputs[0] if isinstance(inputs, tuple) else inputs)) % 2
    (unpacked, _), = list(kbert.data.task_dataset(model.preprocessor, inputs, labels, batch_size=16))
    (packed, packed_labels), = list(kbert.data.task_dataset(model.preprocessor, inputs, labels, batch_size=16,
                                                           packing=True))
    rows = numpy(packed["token_ids"]).shape[0]
    assert rows < len(labels) and (numpy(packed_labels) == labels).all()
    assert numpy(unpacked["padding_mask"]).sum() == numpy(packed["padding_mask"]).sum()  # every token, once

    # Every token's vector, as each example alone in a row of its own (unpacked) computes it.
    tokens = numpy(model.encoder.packed_sequence_output(packed)).reshape(-1, model.encoder.hidden_dim)
    alone = numpy(model.encoder(unpacked)["sequence_output"])
    for i, start in enumerate(numpy(packed["cls_positions"])):
        length = int(numpy(unpacked["padding_mask"])[i].sum())
        np.testing.assert_allclose(tokens[start:start + length], alone[i, :length], atol=1e-5)

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    np.testing.assert_allclose(numpy(model(packed)), numpy(model(unpacked)), atol=1e-5)
    gradients = [
        gradient_function(lambda x=x: loss(labels, model(x, training=True)), model.trainable_variables)()
        for x in (unpacked, packed)
    ]
    for variable, from_unpacked, from_packed in zip(model.trainable_variables, *gradients):
        np.testing.assert_allclose(numpy(from_packed), numpy(from_unpacked), atol=1e-5, err_msg=variable.path)


@pytest.mark.all_backends
def test_packed_fit_and_evaluate_mean_what_they_mean_unpacked():
    keras.utils.set_random_seed(0)
    model = tiny_classifier(sequence_length=16, dropout=0.0)
    weights = np.linspace(0.5, 2.0, len(TEXTS))
    labels = [1, 0, 0, 1, 1, 1, 0]
    history = model.fit(TEXTS, labels, batch_size=4, epochs=2, verbose=0, packing=True)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert int(numpy(model.optimizer.iterations)) == 4  # batch_size examples per step, as unpacked
    # Weighted loss and accuracy over the same examples, whatever rows they share.
    unpacked = model.evaluate(TEXTS, labels, sample_weight=weights, batch_size=4, verbose=0, return_dict=True)
    packed = model.evaluate(TEXTS, labels, sample_weight=weights, batch_size=4, verbose=0, return_dict=True,
                            packing=True)
    assert packed == pytest.approx(unpacked, abs=1e-5)


SENTENCES = [["the", "cat", "sat"], ["a", "dog"], ["free", "prize", "now", "!"], ["see", "you", "soon"],
             ["the", "mat"], ["good", "film", "now"]]
TAGS = [["O", "B-X", "O"], ["O", "B-X"], ["B-X", "I-X", "O", "O"], ["O", "B-X", "O"], ["O", "B-X"],
        ["B-X", "I-X", "O"]]


def test_a_packed_tagger_batch_gives_each_token_its_logits_loss_and_gradients_as_alone():
    keras.utils.set_random_seed(0)
    tagger = kbert.tagger("tiny", labels=["O", "B-X", "I-X"], vocabulary=TINY_VOCABULARY, sequence_length=16,
                          num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0)
    (unpacked, labels, weights), = list(kbert.data.task_dataset(tagger.preprocessor, SENTENCES, TAGS, batch_size=8))
    (packed, packed_labels, packed_weights), = list(
        kbert.data.task_dataset(tagger.preprocessor, SENTENCES, TAGS, batch_size=8, packing=True))
    assert numpy(packed["token_ids"]).shape[0] < len(SENTENCES)
    # Each example's labels and weights sit on its own tokens, and its logits are those it gets alone.
    logits = numpy(tagger(packed)).reshape(-1, 3)
    alone = numpy(tagger(unpacked))
    flat = {name: numpy(value).reshape(-1) for name, value in (("labels", packed_labels), ("weights", packed_weights))}
    for i, start in enumerate(numpy(packed["cls_positions"])):
        length = int(numpy(unpacked["padding_mask"])[i].sum())
        np.testing.assert_array_equal(flat["labels"][start:start + length], numpy(labels)[i, :length])
        np.testing.assert_array_equal(flat["weights"][start:start + length], numpy(weights)[i, :length])
        np.testing.assert_allclose(logits[start:start + length], alone[i, :length], atol=1e-5)
    loss = tagger.loss  # averaged over the weighted tokens (the first of each word)
    values = [float(numpy(loss(y, tagger(x), w))) for x, y, w in ((unpacked, labels, weights),
                                                                  (packed, packed_labels, packed_weights))]
    assert values[0] == pytest.approx(values[1], abs=1e-6)
    gradients = [gradient_function(lambda x=x, y=y, w=w: loss(y, tagger(x, training=True), w),
                                   tagger.trainable_variables)()
                 for x, y, w in ((unpacked, labels, weights), (packed, packed_labels, packed_weights))]
    for variable, from_unpacked, from_packed in zip(tagger.trainable_variables, *gradients):
        np.testing.assert_allclose(numpy(from_packed), numpy(from_unpacked), atol=1e-5, err_msg=variable.path)
    unpacked_metrics = tagger.evaluate(SENTENCES, TAGS, batch_size=4, verbose=0, return_dict=True)
    packed_metrics = tagger.evaluate(SENTENCES, TAGS, batch_size=4, verbose=0, return_dict=True, packing=True)
    assert packed_metrics == pytest.approx(unpacked_metrics, abs=1e-5)


TINY = {"num_layers": 2, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32, "dropout": 0.0}
QUESTIONS = [
    {"question": "who sat ?", "context": "the cat sat on the mat . the dog sat on the cat . a film now ! see you soon .",
     "answers": [{"text": "the dog", "answer_start": 25}]},
    {"question": "what now ?", "context": "free prize now !", "answers": [{"text": "free prize", "answer_start": 0}]},
    {"question": "see ?", "context": "see you soon .", "answers": [{"text": "you", "answer_start": 4}]},
    {"question": "what film ?", "context": "a good film", "answers": [{"text": "good film", "answer_start": 2}]},
]


def assert_packed_loss_and_gradients_as_unpacked(model, unpacked, packed, targets, packed_targets):
    """The model's compiled loss on a packed batch, and its gradients, are those of the batch unpacked."""
    def loss(x, y):
        return model.compute_loss(x=x, y=y, y_pred=model(x, training=True), training=True)

    values = [float(numpy(loss(x, y))) for x, y in ((unpacked, targets), (packed, packed_targets))]
    assert values[0] == pytest.approx(values[1], abs=1e-6)
    gradients = [gradient_function(lambda x=x, y=y: loss(x, y), model.trainable_variables)()
                 for x, y in ((unpacked, targets), (packed, packed_targets))]
    for variable, from_unpacked, from_packed in zip(model.trainable_variables, *gradients):
        np.testing.assert_allclose(numpy(from_packed), numpy(from_unpacked), atol=1e-5, err_msg=variable.path)


def test_packed_question_windows_give_each_window_its_span_logits_loss_and_gradients_as_alone():
    keras.utils.set_random_seed(0)
    answerer = kbert.question_answerer("tiny", vocabulary=TINY_VOCABULARY, sequence_length=24, doc_stride=8,
                                       max_question_length=4, **TINY)
    (unpacked, targets), = list(kbert.data.task_dataset(answerer.preprocessor, QUESTIONS, batch_size=16))
    (packed, packed_targets), = list(kbert.data.task_dataset(answerer.preprocessor, QUESTIONS, batch_size=16,
                                                            packing=True))
    windows = numpy(unpacked["token_ids"]).shape[0]
    assert windows > len(QUESTIONS) and numpy(packed["token_ids"]).shape[0] < windows  # a long context's windows
    lengths = numpy(unpacked["padding_mask"]).sum(axis=1)
    outputs, alone = answerer(packed), answerer(unpacked)
    for name in ("start_logits", "end_logits"):
        np.testing.assert_array_equal(numpy(packed_targets[name]), numpy(targets[name]))
        for i, length in enumerate(lengths):
            # A window's own tokens as alone; no logit beyond them to take a share of the softmax.
            np.testing.assert_allclose(numpy(outputs[name])[i, :length], numpy(alone[name])[i, :length], atol=1e-5)
            assert (numpy(outputs[name])[i, length:] < -1e3).all() and (numpy(alone[name])[i, length:] < -1e3).all()
    assert_packed_loss_and_gradients_as_unpacked(answerer, unpacked, packed, targets, packed_targets)


def test_packed_choices_score_each_choice_as_alone():
    keras.utils.set_random_seed(0)
    chooser = kbert.multiple_choice("tiny", num_choices=3, vocabulary=TINY_VOCABULARY, sequence_length=16, **TINY)
    contexts = ["the cat sat", "free prize now", "see you"]
    choices = [["on the mat", "a film", "bad"], ["!", "good film now", "the dog"], ["soon", "now", "a cat sat on"]]
    labels = np.array([0, 1, 0])
    (unpacked, targets), = list(kbert.data.task_dataset(chooser.preprocessor, (contexts, choices), labels))
    (packed, packed_targets), = list(kbert.data.task_dataset(chooser.preprocessor, (contexts, choices), labels,
                                                            packing=True))
    assert numpy(packed["token_ids"]).shape[0] < len(contexts) * 3
    assert numpy(packed["cls_positions"]).shape == (9,)  # one sequence per choice
    np.testing.assert_allclose(numpy(chooser(packed)), numpy(chooser(unpacked)), atol=1e-5)
    assert_packed_loss_and_gradients_as_unpacked(chooser, unpacked, packed, targets, packed_targets)


def test_tasks_that_do_not_pack_say_so():
    embedder = kbert.embedder("tiny", vocabulary=TINY_VOCABULARY, sequence_length=8, **TINY)
    with pytest.raises(ValueError, match=r"^packing=True: a EmbedderPreprocessor's examples are not packed"):
        kbert.data.task_dataset(embedder.preprocessor, ["the cat"], packing=True)
    with pytest.raises(ValueError, match="does not train on packed batches"):
        embedder.packed_call({})


def test_packing_refuses_replicas_that_would_split_its_rows(monkeypatch):
    from kbert.models import task_model

    model = tiny_classifier(sequence_length=16)

    class TwoReplicas:
        num_replicas_in_sync = 2

    monkeypatch.setattr(task_model, "model_strategy", lambda model: TwoReplicas())
    with pytest.raises(ValueError, match=r"^packing=True trains on one device: a packed batch's rows cannot be split"):
        model.fit(TEXTS, [0, 1, 0, 1, 0, 1, 0], packing=True, verbose=0)
