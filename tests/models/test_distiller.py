import json

import keras
import numpy as np
import pytest

import kbert
from kbert.compression import distillation_loss
from kbert.preprocessing.input_pipeline import examples_dataset
from tests.callbacks import event_files
from tests.test_case import (
    TINY_VOCABULARY,
    assert_allclose,
    assert_array_equal,
    numpy,
    tiny_classifier,
    tiny_encoder_kwargs,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

TEXTS = ["good film", "bad film", "a good cat", "a bad cat"] * 8
LABELS = [1, 0, 1, 0] * 8
# Sentences the teacher has not seen, for the transfer set and the checks.
UNSEEN = ["good dog", "bad dog", "the good mat", "the bad mat", "a good dog sat", "a bad dog sat"]


@pytest.fixture(scope="module")
def teacher():
    """A tiny classifier fine-tuned on a separable task: "good" is class 1, "bad" class 0.

    A few epochs separate the classes by small margins; its logits are then
    scaled up so that it is as sure of them as a well-trained teacher.
    """
    keras.utils.set_random_seed(2)
    model = tiny_classifier()
    model.compile(learning_rate=1e-2)
    model.fit(TEXTS, LABELS, batch_size=8, epochs=15, verbose=0)
    # Scaled to a margin of 8 between the two logits at most: sure, and no
    # probability rounds to 0.
    logits = model.predict(UNSEEN, verbose=0)
    scale = 8.0 / np.abs(logits[:, 1] - logits[:, 0]).max()
    kernel, bias = model.output_dense.get_weights()
    model.output_dense.set_weights([scale * kernel, scale * bias])
    assert model.classify(UNSEEN) == [1, 0, 1, 0, 1, 0]
    return model


def mean_kl(student, teacher, texts):
    p, q = teacher.predict_proba(texts, verbose=0), student.predict_proba(texts, verbose=0)
    return float((p * (np.log(p) - np.log(q))).sum(-1).mean())


def test_student_learns_the_teachers_decision_from_its_predictions_alone(teacher):
    keras.utils.set_random_seed(0)
    # DistilBERT's start: the teacher's bottom layer, and a new output layer.
    student_encoder = teacher.encoder.truncated([0])
    distiller = kbert.Distiller(teacher, student_encoder, temperature=2.0, alpha=1.0)
    assert isinstance(distiller.student, kbert.Classifier) and distiller.student.encoder is student_encoder
    assert distiller.student.class_names == teacher.class_names
    # At this rate the student follows the teacher within 8 epochs on each backend
    # (seeds 0 and 1 tried); at 3e-3, how far it gets depends on the seed.
    distiller.compile(learning_rate=1e-2)
    before = mean_kl(distiller.student, teacher, UNSEEN)
    # No labels at all: the teacher's predictions are the only targets.
    history = distiller.fit(unlabeled=TEXTS, batch_size=8, epochs=8, verbose=0).history
    assert history["label_loss"] == [0.0] * 8 and history["accuracy"] == [0.0] * 8
    assert history["distillation_loss"][-1] < 0.8 * history["distillation_loss"][0]
    # On sentences neither has trained on, the student now decides as the teacher does.
    assert mean_kl(distiller.student, teacher, UNSEEN) < 0.7 * before
    assert distiller.student.classify(UNSEEN) == teacher.classify(UNSEEN)


def test_alpha_zero_trains_as_the_student_trains_on_its_labels(teacher):
    student = tiny_classifier(dropout=0.0, encoder_options={"num_layers": 1})
    twin = kbert.Classifier.from_config(student.get_config())
    twin.set_weights(student.get_weights())
    distiller = kbert.Distiller(teacher, student, alpha=0.0)
    distiller.compile(optimizer=keras.optimizers.SGD(0.5))
    twin.compile(optimizer=keras.optimizers.SGD(0.5))
    texts, labels = TEXTS[:8], LABELS[:8]
    # One batch of everything, in order: the same gradient step.
    ours = distiller.fit(texts, labels, batch_size=8, shuffle=False, verbose=0).history
    theirs = twin.fit(texts, labels, batch_size=8, shuffle=False, verbose=0).history
    assert_allclose(ours["loss"], theirs["loss"], rtol=1e-5)
    assert_allclose(ours["label_loss"], theirs["loss"], rtol=1e-5)
    assert ours["accuracy"] == theirs["accuracy"]
    for a, b in zip(student.get_weights(), twin.get_weights()):
        assert_allclose(a, b, atol=1e-6)


def test_unlabeled_examples_count_in_the_distillation_term_only(teacher):
    alpha, temperature = 0.3, 3.0
    student = tiny_classifier(dropout=0.0, encoder_options={"num_layers": 1})
    distiller = kbert.Distiller(teacher, student, temperature, alpha)
    labelled, unlabelled = TEXTS[:3], UNSEEN[:2]
    examples, _ = distiller.teacher_examples([[(labelled, LABELS[:3]), (unlabelled, None)], []], verbose=0)
    (inputs, targets), = examples_dataset(distiller.student.preprocessor, examples, batch_size=5)
    assert_array_equal(targets["labels"], LABELS[:3] + [-1, -1])
    assert_allclose(targets["teacher_logits"],
                               teacher.predict(labelled + unlabelled, verbose=0), atol=1e-5)

    logits = distiller(inputs, training=False)
    loss = distiller.compute_loss(inputs, targets, logits, training=False)
    cross_entropy = numpy(keras.losses.sparse_categorical_crossentropy(np.array(LABELS[:3]), logits[:3], from_logits=True))
    soft = numpy(distillation_loss(logits, targets["teacher_logits"], temperature))
    assert_allclose(numpy(loss), (1 - alpha) * np.mean(cross_entropy) + alpha * soft, rtol=1e-5)
    assert_allclose(numpy(distiller.label_loss_tracker.result()), np.mean(cross_entropy), rtol=1e-5)
    assert_allclose(numpy(distiller.distillation_loss_tracker.result()), soft, rtol=1e-5)


def test_fit_predicts_once_logs_the_loss_parts_and_fits_its_schedule(teacher, tmp_path, monkeypatch):
    calls = []
    predict = kbert.Classifier.predict

    def counting_predict(model, x, *args, **kwargs):
        if model is teacher:
            calls.append(len(x))
        return predict(model, x, *args, **kwargs)

    monkeypatch.setattr(kbert.Classifier, "predict", counting_predict)
    distiller = kbert.Distiller(teacher, teacher.encoder.truncated([1]), alpha=0.5)
    schedule = distiller.optimizer._learning_rate
    # The student's width sets the default rate, as for fine-tuning.
    assert schedule.peak_learning_rate == kbert.models.optimization.default_learning_rate(16)
    history = distiller.fit(TEXTS[:6], LABELS[:6], unlabeled=UNSEEN, validation_data=(TEXTS[8:12], LABELS[8:12]),
                            batch_size=4, epochs=3, verbose=0,
                            callbacks=[kbert.callbacks.TensorBoard(str(tmp_path))]).history
    # The teacher predicted once, on the labelled, unlabelled and validation examples together.
    assert calls == [6 + 6 + 4]
    assert schedule.get_config()["total_steps"] == 9 and schedule.get_config()["start_step"] == 0

    parts = ["loss", "label_loss", "distillation_loss", "accuracy"]
    assert sorted(history) == sorted(parts + [f"val_{name}" for name in parts])
    for run, prefix in [("train", ""), ("validation", "val_")]:
        scalars = event_files.scalars(tmp_path / run)
        for name in parts:
            logged = scalars[f"epoch/{name}"]
            assert_allclose([logged[step] for step in range(3)], history[prefix + name], rtol=1e-6)
    # Validation has labels for all its examples: its loss is the weighted sum of its parts.
    assert_allclose(
        history["val_loss"], 0.5 * np.add(history["val_label_loss"], history["val_distillation_loss"]), rtol=1e-5
    )
    assert distiller.evaluate(TEXTS[8:12], LABELS[8:12], verbose=0, return_dict=True) == pytest.approx(
        {name: history[f"val_{name}"][-1] for name in parts}, rel=1e-5
    )
    # The next fit has a warm-up and decay of its own.
    distiller.fit(unlabeled=UNSEEN[:4], batch_size=4, epochs=1, verbose=0)
    assert schedule.get_config()["total_steps"] == 1 and schedule.get_config()["start_step"] == 9


def test_config_round_trips(teacher):
    distiller = kbert.Distiller(teacher, teacher.encoder.truncated([0]), temperature=4.0, alpha=0.25)
    config = distiller.get_config()
    restored = kbert.Distiller.from_config(json.loads(json.dumps(config, default=str)))
    assert (restored.temperature, restored.alpha) == (4.0, 0.25)
    assert restored.teacher.get_config() == teacher.get_config()
    assert restored.student.get_config() == distiller.student.get_config()
    assert restored.student.encoder.num_layers == 1


def other_vocabulary():
    vocabulary = list(TINY_VOCABULARY)
    vocabulary[7], vocabulary[8] = vocabulary[8], vocabulary[7]  # cat <-> dog
    return vocabulary


@pytest.mark.parametrize(
    "make_arguments, error, message",
    [
        (lambda t: (t, t.encoder.truncated([0]), 0.0, 0.5), ValueError, r"`temperature` must be a number > 0, got 0.0"),
        (lambda t: (t, t.encoder.truncated([0]), -2, 0.5), ValueError, r"`temperature` must be a number > 0, got -2"),
        (lambda t: (t, t.encoder.truncated([0]), 2.0, 1.5), ValueError, r"`alpha`.*must be in \[0, 1\], got 1.5"),
        (lambda t: (t, t.encoder.truncated([0]), 2.0, -0.1), ValueError, r"`alpha`.*must be in \[0, 1\], got -0.1"),
        (lambda t: (t.encoder, t.encoder.truncated([0]), 2.0, 0.5), TypeError,
         r"teacher must be a fine-tuned kbert.Classifier or kbert.MultipleChoice.*got Encoder"),
        (lambda t: (t, tiny_classifier(vocabulary=other_vocabulary()), 2.0, 0.5), ValueError,
         r"same vocabulary.*token 7 is 'cat' for the teacher and 'dog' for the student"),
        (lambda t: (t, kbert.Encoder(**tiny_encoder_kwargs(vocabulary_size=50)), 2.0, 0.5), ValueError,
         r"student encoder embeds 50 tokens but the teacher's vocabulary has 27"),
        (lambda t: (t, tiny_classifier(num_classes=3), 2.0, 0.5), ValueError, r"teacher gives 2 logits.*student 3"),
        (lambda t: (t, keras.layers.Dense(2), 2.0, 0.5), TypeError,
         r"student must be a kbert.Encoder or a kbert.Classifier like the teacher, got Dense"),
    ],
    ids=["temperature-0", "temperature-negative", "alpha-above-1", "alpha-negative", "unsupported-teacher",
         "other-vocabulary", "vocabulary-size", "other-classes", "unsupported-student"],
)
def test_bad_arguments_are_named(teacher, make_arguments, error, message):
    with pytest.raises(error, match=message):
        kbert.Distiller(*make_arguments(teacher))


def test_bad_fit_inputs_are_named(teacher):
    distiller = kbert.Distiller(teacher, teacher.encoder.truncated([0]))
    with pytest.raises(ValueError, match="`x` needs its labels `y`"):
        distiller.fit(TEXTS, verbose=0)
    with pytest.raises(ValueError, match="Nothing to train on"):
        distiller.fit(verbose=0)
    with pytest.raises(ValueError, match="reads single texts but the inputs are text pairs"):
        distiller.fit(unlabeled=(UNSEEN, UNSEEN), verbose=0)
    with pytest.raises(ValueError, match="must be of one form"):
        distiller.fit(TEXTS[:2], LABELS[:2], unlabeled=(UNSEEN, UNSEEN), verbose=0)
    with pytest.raises(ValueError, match="computes its own loss"):
        distiller.compile(loss="mse")


@pytest.mark.tensorflow_backend  # pairs differ in preprocessing only; the distillation step is a single text's
def test_text_pair_student_saves_and_exports_like_any_classifier(tmp_path):
    from tests.serving.test_serving_module import SERVE_SCRIPT, run_without_kbert_or_keras

    keras.utils.set_random_seed(1)
    pairs = (["the cat", "a dog", "the film", "free prize"], ["sat on the mat", "sat", "good", "now"])
    teacher = tiny_classifier(num_classes=3)
    teacher.fit(pairs, [0, 1, 2, 1], epochs=1, verbose=0)
    distiller = kbert.Distiller(teacher, teacher.encoder.truncated([1]))
    history = distiller.fit(pairs, [0, 1, 2, 1], unlabeled=(["a cat", "the dog"], ["sat", "ran"]), batch_size=3,
                            epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    student = distiller.student
    assert student.text_pairs is True and student.num_classes == 3
    probabilities = student.predict_proba(pairs, verbose=0)
    assert 0.0 <= student.evaluate_report(pairs, [0, 1, 2, 1])["accuracy"] <= 1.0

    student.save(tmp_path / "student.keras")
    restored = kbert.load_model(str(tmp_path / "student.keras"))
    assert_allclose(restored.predict_proba(pairs, verbose=0), probabilities, atol=1e-6)

    # The export serves raw pairs with the student's probabilities, in a
    # process with neither kbert nor Keras.
    path = kbert.export(student, str(tmp_path / "export"))
    request = {"text": pairs[0], "text_pair": pairs[1]}
    jobs = {"student": {"path": path, "calls": {"serving_default": request}}}
    (tmp_path / "serve.py").write_text(SERVE_SCRIPT)
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    result = run_without_kbert_or_keras([str(tmp_path / "serve.py"), str(tmp_path / "jobs.json")], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])["results"]["student"]["serving_default"]
    assert_allclose(served["probabilities"], probabilities, atol=1e-5)
    assert served["label_ids"] == student.classify(pairs)


@pytest.mark.tensorflow_backend  # the same distillation step as a classifier teacher's
def test_multiple_choice_teacher():
    keras.utils.set_random_seed(3)
    teacher = kbert.multiple_choice("tiny", num_choices=2, vocabulary=TINY_VOCABULARY, sequence_length=8,
                                    **{k: v for k, v in tiny_encoder_kwargs().items()
                                       if k not in ("vocabulary_size", "max_sequence_length")})
    contexts, choices = ["the cat", "a dog", "the film"], [["sat", "ran"], ["sat", "ran"], ["good", "bad"]]
    distiller = kbert.Distiller(teacher, teacher.encoder.truncated([0]))
    assert isinstance(distiller.student, kbert.MultipleChoice) and distiller.student.num_choices == 2
    history = distiller.fit((contexts[:2], choices[:2]), [0, 1], unlabeled=(contexts[2:], choices[2:]),
                            batch_size=2, verbose=0)
    assert np.isfinite(history.history["distillation_loss"]).all()
    assert distiller.student.choose((contexts, choices)).shape == (3,)
