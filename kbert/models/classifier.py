"""Text and text-pair classification on BERT's pooled [CLS] output."""

import keras
import numpy as np

from kbert.backend.model_inputs import is_token_ids
from kbert.backend.tensorflow_support import is_tf_dataset
from kbert.metrics.classification import classification_report
from kbert.metrics.multi_label import multi_label_report
from kbert.metrics.regression import regression_report
from kbert.models.task_model import (
    TaskModel,
    deprecated,
    encoder_and_preprocessor,
    head_setting,
    output_head,
    softmax,
)


@keras.saving.register_keras_serializable(package="kbert")
class Classifier(TaskModel):
    """Classifies texts or text pairs: spam, sentiment, NLI, paraphrase.

    The encoder's pooled `[CLS]` vector goes through dropout and a dense
    layer that gives one logit per class. `fit`, `evaluate` and `predict`
    take raw text (a list of texts, a `(texts_a, texts_b)` tuple of pairs,
    or a `tf.data.Dataset` of them), prepared by the attached
    `kbert.ClassifierPreprocessor`. `predict` returns logits,
    `predict_proba` probabilities and `classify` the class of each text (its
    name, or its id when the classes have no names).

    The model is compiled with BERT's fine-tuning recipe: AdamW (weight decay
    0.01, none on biases and LayerNorm, gradients clipped to norm 1), a
    learning rate that warms up over the first 10 % of each `fit` call's
    steps and then decays linearly to 0, sparse categorical cross-entropy on
    logits, and accuracy. Call `compile` to change any of it.

    Each batch is padded to its longest text, not to the preprocessor's
    `sequence_length`, and `fit` batches texts of similar length together
    (see `kbert.data.task_dataset`): short texts train several times faster.

    For unbalanced classes, `fit(..., class_weight={0: 1.0, 1: 6.0})` weighs
    each example's loss by its class (keys may also be class names), and
    `class_weight="balanced"` computes `n_examples / (num_classes * count)`
    per class from the training labels. `evaluate_report(texts, labels)`
    gives accuracy, precision, recall and F1 and the confusion matrix.

    Args:
        encoder: a `kbert.Encoder`.
        num_classes: number of classes (or None when `preprocessor` is a
            `kbert.ClassifierPreprocessor`, which holds it).
        preprocessor: a `kbert.ClassifierPreprocessor`, or a
            `kbert.TextPacker` whose tokenizer matches the encoder's
            vocabulary (wrapped into one), or None for a model of token ids
            alone (`num_classes` is then required).
        dropout: dropout before the output layer.
        class_names: optional names of the classes, in id order.
        text_pairs: whether the model reads text pairs; default: what it is
            first given.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40, verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16,
    ...                        class_names=["bad", "good"])
    >>> history = clf.fit(["a good film", "a bad film"], [1, 0], epochs=1, verbose=0)
    >>> clf.predict(["good"], verbose=0).shape
    (1, 2)
    >>> clf.classify(["good"])[0] in ("bad", "good")
    True
    """

    def __init__(self, encoder, num_classes=None, preprocessor=None, dropout=0.1, class_names=None,
                 text_pairs=None, problem_type=None, **kwargs):
        encoder, preprocessor = encoder_and_preprocessor(
            encoder, preprocessor, _classifier_preprocessor,
            num_classes=num_classes, class_names=class_names, text_pairs=text_pairs, problem_type=problem_type,
        )
        num_classes = head_setting(preprocessor, "num_classes", num_classes)
        self._problem_type = head_setting(preprocessor, "problem_type", problem_type or "single_label")
        if preprocessor is None and class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"Got {len(class_names)} class names for {num_classes} classes.")

        # === Layers ===
        self.encoder = encoder
        self.output_dropout, self.output_dense = output_head(encoder, num_classes, "logits", dropout=dropout)

        # === Functional model ===
        inputs = encoder.input
        pooled = encoder(inputs)["pooled_output"]
        logits = self.output_dense(self.output_dropout(pooled))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.dropout = dropout
        self._num_classes = num_classes
        self._class_names = None if class_names is None else list(class_names)
        self.compile()

    def packed_call(self, inputs, training=None):
        """Logits `(examples, num_classes)` for a packed batch: each example's `[CLS]` vector, pooled."""
        pooled = self.encoder.packed_pooled_output(inputs, training=training)
        return self.output_dense(self.output_dropout(pooled, training=training))

    @property
    def problem_type(self):
        """"single_label" (softmax over classes), "multi_label" (a sigmoid per label) or "regression"."""
        return self._problem_type

    def default_loss(self):
        """Cross-entropy on logits (sparse, or binary per label for multi-label); mean squared error for scores."""
        if self.problem_type == "multi_label":
            return keras.losses.BinaryCrossentropy(from_logits=True)
        if self.problem_type == "regression":
            return keras.losses.MeanSquaredError()
        return super().default_loss()

    def default_metrics(self, compile_kwargs):
        """Accuracy; for multi-label the accuracy of each (example, label) decision; for scores the mean absolute error."""
        if self.problem_type == "multi_label":
            return [keras.metrics.BinaryAccuracy("accuracy", threshold=0.0)]  # on logits: probability 0.5
        if self.problem_type == "regression":
            return [keras.metrics.MeanAbsoluteError("mean_absolute_error")]
        return super().default_metrics(compile_kwargs)

    @property
    def num_classes(self):
        return self._num_classes if self.preprocessor is None else self.preprocessor.num_classes

    @property
    def class_names(self):
        return self._class_names if self.preprocessor is None else self.preprocessor.class_names

    def fit(self, x=None, y=None, *args, class_weight=None, **kwargs):
        """`TaskModel.fit`, with `class_weight` a dict `{class: weight}` or `"balanced"`.

        Classes missing from the dict weigh 1.0. Keras turns the class
        weights into per-example weights of the training loss and metrics
        (not of `validation_data`).
        """
        if class_weight is not None:
            if self.problem_type != "single_label":
                raise ValueError(f"`class_weight` weighs the classes of a single-label classifier, not a "
                                 f"{self.problem_type} one; give `sample_weight`.")
            if kwargs.get("sample_weight") is not None:
                raise ValueError("Give `class_weight` or `sample_weight`, not both.")
            class_weight = self._class_weight(class_weight, x, y)
        return super().fit(x, y, *args, class_weight=class_weight, **kwargs)

    def _class_weight(self, class_weight, x, y):
        """A weight for every class id, from a dict or `"balanced"`."""
        if isinstance(class_weight, str):
            if class_weight != "balanced":
                raise ValueError(
                    f"`class_weight` must be a dict {{class: weight}} or 'balanced', got {class_weight!r}."
                )
            labels = _dataset_labels(x) if is_tf_dataset(x) else y
            if labels is None:
                raise ValueError("`class_weight='balanced'` needs the training labels `y`.")
            labels = self._check_labels(labels)
            return balanced_class_weight(labels, self.num_classes, self.class_names)
        if not isinstance(class_weight, dict):
            raise TypeError(
                f"`class_weight` must be a dict {{class: weight}} or 'balanced', got a "
                f"{type(class_weight).__name__}."
            )
        weights = {}
        for key, weight in class_weight.items():
            if isinstance(key, str) and self.class_names and key in self.class_names:
                class_id = self.class_names.index(key)
            elif isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= key < self.num_classes:
                class_id = int(key)
            else:
                names = f" or one of {self.class_names}" if self.class_names else ""
                raise ValueError(
                    f"`class_weight` key {key!r} is not a class: use ids 0 to {self.num_classes - 1}{names}."
                )
            if not isinstance(weight, (int, float, np.number)) or not np.isfinite(weight) or weight < 0:
                raise ValueError(f"The weight of class {key!r} must be a finite number >= 0, got {weight!r}.")
            weights[class_id] = float(weight)
        # Every class gets a weight: Keras looks weights up by label id.
        return {i: weights.get(i, 1.0) for i in range(self.num_classes)}

    def classify(self, x, batch_size=None, verbose=0):
        """The class of each text (or pair): its name, or its id when the classes have no names.

        Multi-label: the list of labels whose probability reaches their
        threshold. Regression: the score.
        """
        scores = self.predict(x, batch_size=batch_size, verbose=verbose)
        if self.problem_type == "regression":
            return scores[:, 0].tolist()
        if self.problem_type == "multi_label":
            chosen = self._label_mask(scores)
            names = self.class_names or list(range(self.num_classes))
            return [[names[i] for i in np.flatnonzero(row)] for row in chosen]
        ids = scores.argmax(axis=-1)
        return [self.class_names[i] for i in ids] if self.class_names else ids.tolist()

    def predict_proba(self, x, batch_size=None, **kwargs):
        """Each class's probability: a softmax over the classes, or a sigmoid per label for multi-label."""
        if self.problem_type == "regression":
            raise ValueError("A regression classifier gives scores (`predict`, `classify`), not probabilities.")
        logits = self.predict(x, batch_size=batch_size, **kwargs)
        if self.problem_type == "multi_label":
            return (1 / (1 + np.exp(-np.asarray(logits, "float64")))).astype("float32")
        return softmax(logits)

    def tune_thresholds(self, x, y, batch_size=None, candidates=np.linspace(0.05, 0.95, 19)):
        """A multi-label classifier's threshold per label, chosen for the best F1 of that label on `(x, y)`.

        Each label's threshold is the candidate with the highest F1 on the
        given (validation) data; ties go to the one nearest 0.5. Sets and
        returns them (`preprocessor.thresholds`, saved with the model and
        used by its export).
        """
        if self.problem_type != "multi_label":
            raise ValueError("Thresholds are tuned for a multi-label classifier.")
        truth = self._check_labels(y).astype(bool)
        probabilities = self.predict_proba(x, batch_size=batch_size, verbose=0)
        chosen = []
        for label in range(self.num_classes):
            scores = []
            for threshold in candidates:
                predicted = probabilities[:, label] >= threshold
                correct = np.sum(predicted & truth[:, label])
                f1 = 2 * correct / max(1, predicted.sum() + truth[:, label].sum())
                scores.append((f1, -abs(threshold - 0.5), threshold))
            chosen.append(float(max(scores)[2]))
        self.preprocessor.set_thresholds(chosen)
        return chosen

    def _label_mask(self, logits):
        thresholds = np.asarray(self.preprocessor.thresholds if self.preprocessor is not None else 0.5)
        return 1 / (1 + np.exp(-np.asarray(logits, "float64"))) >= thresholds

    def predict_classes(self, x, batch_size=None, **kwargs):
        """Deprecated: `predict(x).argmax(-1)` gives the class ids, `classify(x)` the classes."""
        deprecated("Classifier.predict_classes", "predict(x).argmax(-1) or classify(x)")
        return self.predict(x, batch_size=batch_size, **kwargs).argmax(axis=-1)

    def evaluate_report(self, x, y=None, batch_size=None, positive_class=1):
        """The scores of the predictions on `x`, as the task's community reports them.

        Takes what `evaluate` takes (texts or text pairs with labels, or a
        `tf.data.Dataset` of `(texts, labels)`). A single-label classifier
        gives `kbert.metrics.classification_report` of the predicted classes
        (accuracy, precision, recall, F1, Matthews' correlation and the
        confusion matrix), with this model's `class_names`; for two classes,
        `positive_class` (id or name; default 1) is the class whose
        precision, recall and F1 are reported at the top level. A
        multi-label one gives `kbert.metrics.multi_label_report` (micro and
        macro F1) at its thresholds; a regression one
        `kbert.metrics.regression_report` (MSE, Pearson, Spearman).
        """
        if y is None and not is_tf_dataset(x):
            raise ValueError("`evaluate_report` needs the true labels: evaluate_report(texts, labels).")
        if is_token_ids(x):
            return self._report(y, self.predict(x, batch_size=batch_size, verbose=0), positive_class)
        labels, scores = [], []
        for batch in self._task_dataset(x, y, batch_size=batch_size).as_numpy_iterator():
            if not isinstance(batch, tuple) or len(batch) < 2:
                raise ValueError("The dataset has no labels; its elements must be (texts, labels).")
            features, batch_labels = batch[0], batch[1]
            scores.append(np.asarray(self.predict_on_batch(features)))
            labels.append(np.asarray(batch_labels))
        return self._report(np.concatenate(labels), np.concatenate(scores), positive_class)

    def _report(self, labels, scores, positive_class):
        if self.problem_type == "regression":
            return regression_report(self._check_labels(labels), scores[:, 0])
        if self.problem_type == "multi_label":
            return multi_label_report(self._check_labels(labels), self._label_mask(scores), self.class_names)
        return classification_report(
            self._check_labels(labels).reshape(-1),
            scores.argmax(axis=-1),
            num_classes=self.num_classes,
            class_names=self.class_names,
            positive_class=positive_class,
        )

    def _check_labels(self, labels):
        """Class ids of `labels` (names or ids), checked by the preprocessor where there is one."""
        if self.preprocessor is not None:
            return self.preprocessor.check_targets(labels)
        if self.problem_type == "regression":
            return np.asarray(labels, "float32").reshape(-1)
        if self.problem_type == "multi_label":
            return np.asarray(labels, "float32")
        labels = np.asarray(labels).reshape(-1)
        if labels.dtype.kind not in "iub":
            raise ValueError(f"Labels must be integer class ids for a model without a preprocessor, got {labels.dtype}.")
        return labels.astype("int32")

    def get_config(self):
        config = super().get_config()
        config["dropout"] = self.dropout
        if self.preprocessor is None:  # else the preprocessor holds them
            config.update(num_classes=self.num_classes, class_names=self.class_names)
            if self.problem_type != "single_label":
                config["problem_type"] = self.problem_type
        return config


def _classifier_preprocessor():
    from kbert.preprocessing.classifier_preprocessor import ClassifierPreprocessor

    return ClassifierPreprocessor


def balanced_class_weight(labels, num_classes, class_names=None):
    """Class weights `n_examples / (num_classes * count)`: each class weighs as much in all.

    A rare class gets a large weight, a common one a small weight, so that
    every class contributes the same total weight to the loss (scikit-learn
    calls this "balanced").

    Example:
    >>> balanced_class_weight([0, 0, 0, 1], num_classes=2)
    {0: 0.6666666666666666, 1: 2.0}

    Raises:
        ValueError: a class has no example, so it has no balanced weight.
    """
    labels = np.asarray(labels).reshape(-1).astype("int64")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"Labels must be in [0, {num_classes}), got {sorted(set(labels.tolist()))}.")
    counts = np.bincount(labels, minlength=num_classes)
    absent = np.flatnonzero(counts == 0)
    if absent.size:
        name = f" ({class_names[absent[0]]!r})" if class_names else ""
        raise ValueError(
            f"Class {absent[0]}{name} has no example in the labels, so 'balanced' weights are "
            "undefined; give `class_weight` as a dict {class: weight}."
        )
    return {i: float(len(labels) / (num_classes * count)) for i, count in enumerate(counts)}


def _dataset_labels(dataset):
    """All labels of a finite `tf.data.Dataset` of `(features, labels)`, batched or not."""
    import tensorflow as tf

    from kbert.preprocessing.task_preprocessor import is_pair_spec

    if int(dataset.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
        raise ValueError(
            "`class_weight='balanced'` cannot count the labels of an infinite dataset; "
            "give `class_weight` as a dict {class: weight}."
        )
    spec = dataset.element_spec
    if not isinstance(spec, tuple) or len(spec) < 2 or is_pair_spec(spec):
        raise ValueError("The dataset has no labels; its elements must be (texts, labels).")
    labels = [np.reshape(y, [-1]) for y in dataset.map(lambda *element: element[1]).as_numpy_iterator()]
    return np.concatenate(labels) if labels else np.zeros([0], "int32")
