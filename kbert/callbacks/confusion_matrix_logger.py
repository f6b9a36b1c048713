"""A classifier's confusion matrix and per-class scores on validation data, in TensorBoard."""

import keras
import numpy as np

from kbert.callbacks.images import CARD_WIDTH, heat_map
from kbert.callbacks.writers import LazyWriters
from kbert.metrics.classification import classification_report, format_classification_report

IMAGE_TAG = "report/confusion_matrix"


class ConfusionMatrixLogger(keras.callbacks.Callback):
    """Scores a classifier on validation data at epoch ends and draws its confusion matrix.

    At the end of every `every`-th epoch the model classifies
    `validation_data` and this callback writes, in the `validation` run of
    `log_dir` (next to Keras' `validation` curves), numbered by epoch:

    - an image `report/confusion_matrix`: rows are the true classes,
      columns the predicted ones, each cell with its count and coloured by
      its share of the row (so the diagonal shows each class' recall), under
      a title with the accuracy; at least 400 pixels wide, so TensorBoard's
      image card shows it about at its size. (Its `report/` group sorts
      after the `epoch` curves, which TensorBoard opens first.)
    - scalars `precision/<class>`, `recall/<class>`, `f1/<class>` and
      `macro_f1`;
    - a text `classification_report`: the per-class table and the matrix
      (`kbert.metrics.format_classification_report`).

    A `kbert.Classifier` is scored by its `evaluate_report`, so
    `validation_data` is what that takes: `(texts, labels)`, `((texts_a,
    texts_b), labels)` or a `tf.data.Dataset` of `(texts, labels)`, and the
    classes are named by the model's `class_names`. Another Keras model is
    scored by the argmax of `predict(x)` against the class ids `y`. `report`
    holds the last `kbert.metrics.classification_report`.

    Args:
        log_dir: TensorBoard's log directory (the `log_dir` of the
            `TensorBoard` callback).
        validation_data: `(x, y)`, or a labelled `tf.data.Dataset` for a
            `kbert.Classifier`.
        class_names: names of the classes, for models without their own.
        batch_size: examples per prediction batch.
        every: epochs between reports.

    Example:
    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    >>> model.compile("sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x, y = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]), np.array([0, 1, 1])
    >>> logger = ConfusionMatrixLogger(tempfile.mkdtemp(), (x, y), class_names=["ham", "spam"])
    >>> _ = model.fit(x, y, epochs=2, verbose=0, callbacks=[logger])
    >>> int(np.sum(logger.report["confusion_matrix"])), sorted(logger.report["per_class"])
    (3, ['ham', 'spam'])
    """

    def __init__(self, log_dir, validation_data, class_names=None, batch_size=None, every=1):
        super().__init__()
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise ValueError(f"`every` must be a positive number of epochs, got {every!r}.")
        if not _is_dataset(validation_data) and (
            not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2
        ):
            raise ValueError(
                "`validation_data` must be (inputs, labels) or a tf.data.Dataset of them, got a "
                f"{type(validation_data).__name__}."
            )
        self.log_dir = str(log_dir)
        self.validation_data = validation_data
        self.class_names = None if class_names is None else [str(name) for name in class_names]
        self.batch_size = batch_size
        self.every = int(every)
        self.report = None
        self._writers = LazyWriters(self.log_dir)

    def score(self):
        """The `classification_report` of the model on the validation data now."""
        if hasattr(self.model, "evaluate_report"):
            if _is_dataset(self.validation_data):
                return self.model.evaluate_report(self.validation_data, batch_size=self.batch_size)
            x, y = self.validation_data
            return self.model.evaluate_report(x, y, batch_size=self.batch_size)
        if _is_dataset(self.validation_data):
            raise ValueError(
                "A tf.data.Dataset as `validation_data` needs a kbert.Classifier; give (x, y) "
                "arrays for other models."
            )
        x, y = self.validation_data
        scores = np.asarray(self.model.predict(x, batch_size=self.batch_size, verbose=0))
        if scores.ndim != 2:
            raise ValueError(
                f"The model predicts shape {scores.shape}; a confusion matrix needs one score per "
                "class, shape (examples, classes)."
            )
        return classification_report(y, scores, num_classes=scores.shape[-1], class_names=self.class_names)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every:
            return
        self.report = self.score()
        self.write(self.report, step=epoch)

    def on_train_end(self, logs=None):
        self._writers.close()

    def write(self, report, step):
        """Writes the image, scalars and text of a `classification_report` at `step`."""
        import tensorflow as tf

        names = list(report["per_class"])
        counts = np.asarray(report["confusion_matrix"], "int64")
        totals = counts.sum(axis=1, keepdims=True)
        shares = np.divide(counts, totals, out=np.full(counts.shape, np.nan), where=totals > 0)
        image = heat_map(
            shares, names, names, cell_texts=counts,
            # Large cells for few classes; the matrix stays about 300 pixels wide until the counts need more.
            cell_size=int(np.clip(300 // max(len(names), 1), 24, 96)),
            title=f"accuracy {report['accuracy']:.4f} on {report['num_examples']} examples",
            row_title="true", column_title="predicted", colour_bar="share of the row",
            min_width=CARD_WIDTH,
        )
        with self._writers.writing("validation"):
            tf.summary.image(IMAGE_TAG, image[None], step=step,
                             description="Rows: true classes; columns: predicted classes. "
                                         "Colour: share of the row.")
            for name, scores in report["per_class"].items():
                for key in ("precision", "recall", "f1"):
                    tf.summary.scalar(f"{key}/{name}", scores[key], step=step)
            tf.summary.scalar("macro_f1", report["macro_f1"], step=step)
            # Four leading spaces: TensorBoard's Markdown shows the table preformatted.
            table = "\n".join("    " + line for line in format_classification_report(report).splitlines())
            tf.summary.text("classification_report", table, step=step)


def _is_dataset(value):
    import tensorflow as tf

    return isinstance(value, tf.data.Dataset)
