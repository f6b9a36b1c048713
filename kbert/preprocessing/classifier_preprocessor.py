"""The classifier's task preprocessor: texts or text pairs in, class probabilities and labels out."""

import keras
import numpy as np
import tensorflow as tf

from kbert.preprocessing.task_preprocessor import TaskPreprocessor, check_class_ids, probabilities


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
        packer: a `kbert.Preprocessor`.
        num_classes: how many classes.
        class_names: optional names of the classes, in id order.
        text_pairs: whether the texts come in pairs; None until the first
            texts are seen.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film"]
    >>> packer = kbert.Preprocessor(kbert.Tokenizer(vocab), sequence_length=8)
    >>> preprocessor = kbert.ClassifierPreprocessor(packer, num_classes=2, class_names=["neg", "pos"])
    >>> inputs, labels = preprocessor(["good film"], [1])
    >>> inputs["token_ids"].numpy().tolist()
    [[2, 5, 7, 3, 0, 0, 0, 0]]
    >>> preprocessor.reverse(tf.constant([[0.0, 2.0]]))["labels"].numpy().tolist()
    [b'pos']
    """

    def __init__(self, packer, num_classes, class_names=None, text_pairs=None, **kwargs):
        super().__init__(packer, text_pairs=text_pairs, **kwargs)
        if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2:
            raise ValueError(f"`num_classes` must be an integer of at least 2, got {num_classes!r}.")
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ValueError(
                    f"Got {len(class_names)} class names for {num_classes} classes: {class_names}."
                )
        self.num_classes = int(num_classes)
        self.class_names = class_names

    def check_targets(self, y):
        """Class ids, or class names where the classifier has them; names the first label that is neither."""
        y = np.asarray(y)
        if y.dtype.kind in "USO" and y.size and all(isinstance(label, str) for label in y.reshape(-1)):
            if not self.class_names:
                raise ValueError(f"Labels are class names ({str(y.reshape(-1)[0])!r}, ...), but this classifier "
                                 "has no class_names: give class ids, or build it with class_names=[...].")
            index = {name: i for i, name in enumerate(self.class_names)}
            flat = [str(label) for label in y.reshape(-1)]
            unknown = next((i for i, label in enumerate(flat) if label not in index), None)
            if unknown is not None:
                raise ValueError(f"Label {flat[unknown]!r} at index {unknown} is not one of this classifier's "
                                 f"classes {self.class_names}.")
            y = np.asarray([index[label] for label in flat], dtype="int32").reshape(y.shape)
        return check_class_ids(y, self.num_classes)

    def reverse(self, logits):
        """`probabilities` `(batch, num_classes)`, `label_ids` and, with class names, `labels`."""
        probs = probabilities(logits)
        label_ids = tf.argmax(probs, axis=-1, output_type=tf.int32)
        outputs = {"probabilities": probs, "label_ids": label_ids}
        if self.class_names:
            outputs["labels"] = tf.gather(tf.constant(self.class_names), label_ids)
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "class_names": self.class_names})
        return config
