"""The classifier's task preprocessor: texts or text pairs in, class probabilities and labels out."""

import keras
import numpy as np
import tensorflow as tf

from kbert.preprocessing.task_preprocessor import TaskPreprocessor, check_class_ids, probabilities

# What a classifier's head answers: one class of several (softmax), any of
# several labels (a sigmoid each), or a score (regression).
PROBLEM_TYPES = ("single_label", "multi_label", "regression")


def check_scores(y):
    """Regression targets: finite numbers, as float32; names the first that is not."""
    try:
        scores = np.asarray(y, dtype="float32").reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("Regression targets must be numbers.") from None
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        raise ValueError(f"Regression targets must be finite; {scores[bad[0]]} at index {bad[0]} is not.")
    return scores


@keras.saving.register_keras_serializable(package="kbert")
class ClassifierPreprocessor(TaskPreprocessor):
    """Texts or text pairs to model inputs with class ids; logits to probabilities and labels.

    Forward: texts (or `(texts_a, texts_b)`) are packed by the packer
    (`[CLS] a [SEP] b [SEP]`); labels must be class ids in
    `[0, num_classes)`. Reverse: `reverse(logits)` gives `probabilities`,
    `label_ids` and, when the classes have names, `labels`. A batch is
    padded to its longest text only (rounded up to a multiple of 8): a
    classifier's logits do not depend on padding.

    Args:
        packer: a `kbert.TextPacker`.
        num_classes: how many classes.
        class_names: optional names of the classes, in id order.
        text_pairs: whether the texts come in pairs; None until the first
            texts are seen.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film"]
    >>> packer = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=8)
    >>> preprocessor = kbert.ClassifierPreprocessor(packer, num_classes=2, class_names=["neg", "pos"])
    >>> inputs, labels = preprocessor(["good film"], [1])
    >>> inputs["token_ids"].numpy().tolist()
    [[2, 5, 7, 3, 0, 0, 0, 0]]
    >>> preprocessor.reverse(tf.constant([[0.0, 2.0]]))["labels"].numpy().tolist()
    [b'pos']
    """

    packs_examples = True

    def __init__(self, packer, num_classes, class_names=None, text_pairs=None, problem_type="single_label",
                 thresholds=None, **kwargs):
        super().__init__(packer, text_pairs=text_pairs, **kwargs)
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"`problem_type` must be one of {PROBLEM_TYPES}, got {problem_type!r}.")
        least = {"single_label": 2, "multi_label": 1, "regression": 1}[problem_type]
        if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < least:
            raise ValueError(f"`num_classes` must be an integer of at least {least}, got {num_classes!r}.")
        if problem_type == "regression" and num_classes != 1:
            raise ValueError(f"A regression head has one output (num_classes=1), got {num_classes!r}.")
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ValueError(
                    f"Got {len(class_names)} class names for {num_classes} classes: {class_names}."
                )
            if len(set(class_names)) != len(class_names):
                raise ValueError(f"The class names repeat a name: {class_names}.")
            if not all(name.strip() for name in class_names):
                # An answer of "" (or spaces) reads as no answer at all.
                raise ValueError(f"A class name is empty or only spaces: {class_names}.")
        self.num_classes = int(num_classes)
        self.class_names = class_names
        self.problem_type = problem_type
        self.thresholds = None
        if problem_type == "multi_label":
            self.set_thresholds(0.5 if thresholds is None else thresholds)
        elif thresholds is not None:
            raise ValueError("`thresholds` are for a multi_label classifier.")

    def set_thresholds(self, thresholds):
        """A multi-label classifier's probability threshold per label (one number: the same for all)."""
        values = np.broadcast_to(np.asarray(thresholds, dtype="float64"), [self.num_classes])
        if not (np.isfinite(values).all() and ((values > 0) & (values < 1)).all()):
            raise ValueError(f"Thresholds must be between 0 and 1 (both excluded), got {thresholds!r}.")
        self.thresholds = [float(value) for value in values]

    def check_targets(self, y):
        """The targets as the loss takes them, checked; names the first bad one.

        - single label: class ids, or class names where the classifier has them;
        - multi label: a list of labels (names or ids) per example, or
          `(examples, num_classes)` 0/1 indicators;
        - regression: finite numbers.
        """
        if self.problem_type == "regression":
            return check_scores(y)
        if self.problem_type == "multi_label":
            return self._indicators(y)
        y = np.asarray(y)
        if y.dtype.kind in "USO" and y.size and all(isinstance(label, str) for label in y.reshape(-1)):
            y = self._class_ids([str(label) for label in y.reshape(-1)]).reshape(y.shape)
        return check_class_ids(y, self.num_classes)

    def _class_ids(self, names, where=""):
        if not self.class_names:
            raise ValueError(f"Labels are class names ({names[0]!r}, ...), but this classifier has no "
                             "class_names: give class ids, or build it with class_names=[...].")
        index = {name: i for i, name in enumerate(self.class_names)}
        for position, name in enumerate(names):
            if name not in index:
                raise ValueError(f"Label {name!r} at index {where or position} is not one of this classifier's "
                                 f"classes {self.class_names}.")
        return np.asarray([index[name] for name in names], dtype="int32")

    def _indicators(self, y):
        """Multi-label targets as `(examples, num_classes)` float32 0/1 indicators."""
        if isinstance(y, np.ndarray) and y.ndim == 2 and y.dtype.kind in "iubf":
            if y.shape[1] != self.num_classes or not np.isin(y, (0, 1)).all():
                raise ValueError(f"Multi-label targets as an array must be (examples, {self.num_classes}) of 0 "
                                 f"and 1, got shape {y.shape}.")
            return y.astype("float32")
        indicators = np.zeros([len(y), self.num_classes], "float32")
        for row, labels in enumerate(y):
            if isinstance(labels, (str, bytes)) or not hasattr(labels, "__iter__"):
                raise ValueError(f"Multi-label targets are a list of labels per example; example {row} has "
                                 f"{labels!r}.")
            labels = list(labels)
            if all(isinstance(label, str) for label in labels):
                ids = self._class_ids(labels, where=row) if labels else []
            else:
                ids = check_class_ids(np.asarray(labels, dtype="int64").reshape(-1), self.num_classes)
            indicators[row, ids] = 1.0
        return indicators

    def reverse(self, logits):
        """The answers: by problem type.

        - single label: `probabilities` `(batch, num_classes)`, `label_ids`
          and, with class names, `labels`;
        - multi label: `probabilities` (a sigmoid per label), `label_mask`
          (1 where the probability reaches the label's threshold) and, with
          class names, `labels` (the chosen names, padded with "");
        - regression: `scores`.
        """
        if self.problem_type == "regression":
            return {"scores": tf.cast(logits, tf.float32)[:, 0]}
        if self.problem_type == "multi_label":
            probs = tf.sigmoid(tf.cast(logits, tf.float32))
            mask = probs >= tf.constant(self.thresholds, tf.float32)
            outputs = {"probabilities": probs, "label_mask": tf.cast(mask, tf.int32)}
            if self.class_names:
                names = tf.broadcast_to(tf.constant(self.class_names), tf.shape(mask))
                outputs["labels"] = tf.ragged.boolean_mask(names, mask).to_tensor("")
            return outputs
        probs = probabilities(logits)
        label_ids = tf.argmax(probs, axis=-1, output_type=tf.int32)
        outputs = {"probabilities": probs, "label_ids": label_ids}
        if self.class_names:
            outputs["labels"] = tf.gather(tf.constant(self.class_names), label_ids)
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "class_names": self.class_names})
        if self.problem_type != "single_label":
            config.update(problem_type=self.problem_type, thresholds=self.thresholds)
        return config
