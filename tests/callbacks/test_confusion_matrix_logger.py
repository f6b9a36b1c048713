import keras
import numpy as np
import pytest

from kbert.callbacks import ConfusionMatrixLogger, TensorBoard
from kbert.callbacks.images import MARGIN, TITLE_FONT_SIZE, colour_map
from kbert.metrics.classification import classification_report
from tests.callbacks.event_files import images, scalars, texts
from tests.callbacks.test_images import contains, dark, rendered, text_width

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

NAMES = ["ham", "spam", "eggs"]


def three_class_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def data(count=30, seed=0):
    generator = np.random.default_rng(seed)
    return generator.normal(size=(count, 4)).astype("float32"), generator.integers(0, 3, size=count)


def test_writes_the_matrix_scores_and_table_of_every_epoch(tmp_path):
    model = three_class_model()
    x, y = data()
    validation = data(12, seed=1)
    logger = ConfusionMatrixLogger(tmp_path, validation, class_names=NAMES)
    history = model.fit(x, y, batch_size=10, epochs=2, verbose=0, validation_data=validation,
                        callbacks=[TensorBoard(str(tmp_path), update_freq=1), logger])

    # The numbers, computed here from the final model's predictions.
    predicted = model.predict(validation[0], verbose=0).argmax(-1)
    confusion = np.zeros((3, 3), int)
    np.add.at(confusion, (validation[1], predicted), 1)
    assert logger.report["confusion_matrix"] == confusion.tolist()
    np.testing.assert_allclose(logger.report["accuracy"], history.history["val_accuracy"][-1], rtol=1e-6)

    run = tmp_path / "validation"
    found = scalars(run)
    for i, name in enumerate(NAMES):
        predicted_as = confusion[:, i].sum()
        precision = confusion[i, i] / predicted_as if predicted_as else 0.0
        recall = confusion[i, i] / confusion[i].sum() if confusion[i].sum() else 0.0
        assert sorted(found[f"precision/{name}"]) == [0, 1]
        np.testing.assert_allclose(found[f"precision/{name}"][1], precision, rtol=1e-6)
        np.testing.assert_allclose(found[f"recall/{name}"][1], recall, rtol=1e-6)
    assert sorted(found["macro_f1"]) == [0, 1]
    assert sorted(found["epoch/loss"]) == [0, 1]  # Keras' validation curves stay in the same run.

    written = images(run)
    assert "confusion_matrix" not in written  # under `report/`, sorted after the `epoch` curves
    pictures = written["report/confusion_matrix"]
    assert sorted(pictures) == [0, 1]
    assert pictures[1].ndim == 3 and pictures[1].shape[0] > 3 * 10
    # As wide as TensorBoard's card, with the whole title inside it.
    height, width, _ = pictures[1].shape
    assert width >= 400
    title = f"accuracy {logger.report['accuracy']:.4f} on 12 examples"
    assert text_width(title) <= width - 2 * MARGIN and contains(pictures[1], rendered(title))
    table = texts(run)["classification_report"][1]
    assert all(name in table for name in NAMES) and "confusion matrix" in table


def test_every_skips_epochs_and_inputs_are_checked(tmp_path):
    model = three_class_model()
    x, y = data()
    logger = ConfusionMatrixLogger(tmp_path, (x, y), every=2)
    model.fit(x, y, batch_size=10, epochs=3, verbose=0, callbacks=[logger])
    assert sorted(images(tmp_path / "validation")["report/confusion_matrix"]) == [1]
    assert sorted(logger.report["per_class"]) == ["0", "1", "2"]
    with pytest.raises(ValueError, match="`validation_data` must be"):
        ConfusionMatrixLogger(tmp_path, x)
    with pytest.raises(ValueError, match="`every`"):
        ConfusionMatrixLogger(tmp_path, (x, y), every=0)


def test_long_class_names_and_titles_widen_the_image(tmp_path):
    names = ["a class with a rather long name", "short"]
    labels = np.array([0, 0, 1] * 40)
    report = classification_report(labels, labels, num_classes=2, class_names=names)
    logger = ConfusionMatrixLogger(tmp_path, (np.zeros((1, 4)), np.zeros(1)))
    logger.write(report, step=0)
    logger.on_train_end()
    image = images(tmp_path / "validation")["report/confusion_matrix"][0]
    title = "accuracy 1.0000 on 120 examples"
    assert image.shape[1] > 400 and contains(image, rendered(title))
    # The long name is written whole, left of its row (its column label turns upwards).
    assert contains(image, rendered(names[0]))
    assert not dark(image[:, :MARGIN]).any() and not dark(image[:, -MARGIN:]).any()
    # The counts, white on the darkest colour of the full diagonal, at the labels' full size.
    for text in ("80", "40"):
        assert contains(image, rendered(text, TITLE_FONT_SIZE, (255, 255, 255), colour_map(1.0)))
