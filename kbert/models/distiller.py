"""Task distillation: a small student task model trained on a fine-tuned teacher's predictions."""

import numbers

import keras
import numpy as np
from keras import ops

from kbert.backend.distribute import MultiWorkerFit, agreed_seed, is_multi_worker, model_strategy
from kbert.backend.model_inputs import one_iterator
from kbert.backend.tensorflow_support import is_tf_dataset, require_tensorflow
from kbert.compression.distillation_loss import distillation_loss
from kbert.io.atomic_files import SavesAtomically
from kbert.models.classifier import Classifier
from kbert.models.constructor_config import ConstructorConfig
from kbert.models.encoder import Encoder
from kbert.models.multiple_choice import MultipleChoice
from kbert.models.optimization import (
    batches_trained,
    bert_adamw,
    default_learning_rate,
    start_schedule_window,
    with_loss_scaling,
)

# The task models whose outputs are one logit per class: what a student can match.
TEACHER_CLASSES = (Classifier, MultipleChoice)
# The label of an example without one (a transfer-set example).
UNLABELED = -1


@keras.saving.register_keras_serializable(package="kbert")
class Distiller(SavesAtomically, MultiWorkerFit, ConstructorConfig, keras.Model):
    """Trains a small student task model to do what a fine-tuned teacher does.

    Task distillation (Hinton et al., 2015; DistilBERT, Sanh et al., 2019):
    the student learns from the labels and from the teacher's predictions,
    softened by a temperature `T`. The loss of a batch is

        loss = (1 - alpha) * label_loss + alpha * distillation_loss

    where `label_loss` is the student's cross-entropy on the labels,
    averaged over the batch's labelled examples, and `distillation_loss` is
    `kbert.compression.distillation_loss(student_logits, teacher_logits, T)`,
    `T**2 * KL(softmax(teacher / T) || softmax(student / T))`, averaged over
    all its examples. The teacher's logits hold more than its labels (how
    sure it is, which wrong class comes second), and they exist for text
    without labels too: `fit(..., unlabeled=texts)` adds a transfer set of
    raw inputs, which count in the distillation term only (TinyBERT's data
    augmentation, Jiao et al., 2020, is the same idea with generated text).

    The defaults are those of DistilBERT's distillation script: `T=2` and
    the distillation term weighted 0.5 against the hard-label term.

    `fit` computes the teacher's logits for all its examples once, at its
    start (`teacher.predict`, with a progress bar unless `verbose=0`), and
    keeps them for every epoch: the teacher runs once however many epochs
    the student trains. The examples, labelled and unlabelled together, are
    then shuffled every epoch and batched by length as a task model's `fit`
    does (`kbert.data.task_dataset`), with the student's preprocessor.

    Logs (History, progress bar and TensorBoard, one scalar each): `loss`,
    `label_loss`, `distillation_loss` and `accuracy` (the student's, on the
    labelled examples; 0 when there are none), and the same with `val_` for
    `validation_data`.

    After `fit`, `distiller.student` is an ordinary kbert task model: save
    it (`.keras`), export it (`kbert.export`), `classify` or
    `evaluate_report` with it. The teacher is not changed. A Distiller has a
    `get_config` that round-trips, but it is a training harness: save the
    student, not the Distiller.

    Args:
        teacher: a fine-tuned `kbert.Classifier` (texts or text pairs) or
            `kbert.MultipleChoice`.
        student: a task model of the teacher's class, or a `kbert.Encoder`,
            on which the Distiller builds one with a copy of the teacher's
            task preprocessor (classes, class names, sequence length) and
            its output dropout. `teacher.encoder.truncated([0, 2, 4])` is
            DistilBERT's student: every other layer of the teacher. Teacher
            and student must read the same vocabulary.
        temperature: `T` > 0; higher values soften the teacher's
            predictions more.
        alpha: the weight of the distillation term, in `[0, 1]`: 0 trains on
            the labels only, 1 on the teacher's predictions only.

    Example:
    >>> texts = ["a good film", "a bad film", "good", "bad"]
    >>> vocab = kbert.learn_vocabulary(texts * 10, vocabulary_size=40, verbose=False)
    >>> teacher = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16,
    ...                            class_names=["bad", "good"])
    >>> history = teacher.fit(texts, [1, 0, 1, 0], verbose=0)
    >>> distiller = kbert.Distiller(teacher, teacher.encoder.truncated([0]))
    >>> history = distiller.fit(texts[:2], [1, 0], unlabeled=["good film", "bad film"], epochs=2,
    ...                         verbose=0)
    >>> sorted(history.history)
    ['accuracy', 'distillation_loss', 'label_loss', 'loss']
    >>> distiller.student.encoder.num_layers, distiller.student.classify(["good"])[0] in ("bad", "good")
    (1, True)
    """

    def __init__(self, teacher, student, temperature=2.0, alpha=0.5, **kwargs):
        teacher, student = (
            keras.saving.deserialize_keras_object(model) if isinstance(model, dict) else model
            for model in (teacher, student)
        )
        check_teacher(teacher)
        student = student_model(teacher, student)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature > 0:
            raise ValueError(f"`temperature` must be a number > 0, got {temperature!r}.")
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 1:
            raise ValueError(
                f"`alpha`, the weight of the distillation loss, must be in [0, 1], got {alpha!r}."
            )
        super().__init__(**kwargs)

        # === Models and metrics ===
        self.teacher = teacher
        self.student = student
        self.label_loss_tracker = keras.metrics.Mean(name="label_loss")
        self.distillation_loss_tracker = keras.metrics.Mean(name="distillation_loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

        # === Config ===
        self.temperature = float(temperature)
        self.alpha = float(alpha)
        self.built = True  # both models are built
        self.compile()

    # --- Only the student trains --------------------------------------------------

    @property
    def trainable_weights(self):
        return self.student.trainable_weights if self.trainable else []

    @property
    def trainable_variables(self):
        return self.trainable_weights

    @property
    def non_trainable_weights(self):
        trainable = {id(w) for w in self.trainable_weights}
        return [w for w in self.weights if id(w) not in trainable]

    @property
    def non_trainable_variables(self):
        return self.non_trainable_weights

    def call(self, inputs, training=None):
        """The student's logits."""
        return self.student(inputs, training=training)

    # --- Compile, loss and metrics --------------------------------------------------

    def compile(self, optimizer="auto", learning_rate=None, **kwargs):
        """Compiles with the student's fine-tuning optimizer; the loss is the distillation loss.

        Args:
            optimizer: `"auto"` for the AdamW with warm-up and linear decay
                that `kbert.Classifier.compile` uses, or any Keras optimizer.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default the fine-tuning rate of the student's width
                (`kbert.models.optimization.default_learning_rate`).
            **kwargs: other arguments of `keras.Model.compile` (not `loss`
                or `metrics`: the Distiller logs its own).
        """
        for name in ("loss", "metrics", "weighted_metrics"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"A Distiller computes its own loss and metrics (see its docstring); "
                    f"`{name}` cannot be set."
                )
            kwargs.pop(name, None)
        if optimizer == "auto":
            optimizer = bert_adamw(default_learning_rate(self.student.encoder.hidden_dim) if learning_rate is None
                                   else learning_rate)
        super().compile(optimizer=with_loss_scaling(optimizer, self.student.encoder.layer_dtype_policy),
                        **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`(1 - alpha) * label_loss + alpha * distillation_loss` of a batch; updates the loss logs."""
        labels, labelled = _labels(y)
        logits = ops.cast(y_pred, "float32")
        count = ops.sum(labelled)
        cross_entropy = keras.losses.sparse_categorical_crossentropy(
            ops.maximum(labels, 0), logits, from_logits=True
        )
        label_loss = ops.sum(cross_entropy * labelled) / ops.maximum(count, 1.0)
        soft_loss = distillation_loss(logits, y["teacher_logits"], self.temperature)
        self.label_loss_tracker.update_state(label_loss, sample_weight=count)
        self.distillation_loss_tracker.update_state(soft_loss, sample_weight=ops.cast(ops.shape(labels)[0], "float32"))
        total = (1.0 - self.alpha) * label_loss + self.alpha * soft_loss
        for loss in self.losses:  # regularizers, if any
            total = total + ops.cast(ops.sum(loss), "float32")
        return total

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        labels, labelled = _labels(y)
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), labels), "float32")
        self.accuracy_tracker.update_state(correct, sample_weight=labelled)
        return self.get_metrics_result()

    def compile_from_config(self, config):
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    # --- Training -------------------------------------------------------------------

    def fit(self, x=None, y=None, unlabeled=None, batch_size=None, epochs=1, validation_data=None,
            verbose="auto", shuffle=True, steps_per_epoch=None, initial_epoch=0, **kwargs):
        """Distils the teacher into the student on raw inputs.

        The arguments are `keras.Model.fit`'s that apply to raw inputs (more
        than ten), with `unlabeled` added.

        Args:
            x: the labelled inputs, as the teacher's task takes them (texts,
                `(texts_a, texts_b)` pairs, `(contexts, choices)`), or None
                to train on `unlabeled` alone.
            y: their labels.
            unlabeled: more inputs of the same form, without labels: the
                teacher's predictions are their only targets.
            batch_size: examples per batch; default the task's.
            epochs: passes over the examples.
            validation_data: `(x, y)` of labelled inputs to score the
                student on after each epoch (the `val_` logs).
            verbose: Keras' `verbose`; also shows the teacher's progress.
            shuffle: shuffle the examples every epoch, batching similar
                lengths together.
            **kwargs: other arguments of `keras.Model.fit` (callbacks, ...).
        """
        if is_tf_dataset(x) or is_tf_dataset(unlabeled):
            raise TypeError(
                "Distiller.fit takes raw inputs (texts, text pairs, ...), not a tf.data.Dataset: it "
                "keeps the teacher's logits of every example for all epochs."
            )
        if x is not None and y is None:
            raise ValueError("`x` needs its labels `y`; pass inputs without labels as `unlabeled`.")
        training = [(x, y)] if x is not None else []
        if unlabeled is not None:
            training.append((unlabeled, None))
        if not training:
            raise ValueError("Nothing to train on: give `x` and `y`, or `unlabeled`, or both.")
        validation = []
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("`validation_data` must be (inputs, labels).")
            validation = [tuple(validation_data)]
        require_tensorflow("Distillation on raw inputs")
        from kbert.preprocessing.input_pipeline import examples_dataset

        examples = self.teacher_examples([training, validation], batch_size, verbose)
        strategy = model_strategy(self)
        seed = agreed_seed(strategy) if shuffle and is_multi_worker(strategy) else None
        dataset = examples_dataset(self.student.preprocessor, examples[0], batch_size, shuffle=shuffle,
                                   seed=seed)
        if validation:
            validation_data = examples_dataset(self.student.preprocessor, examples[1], batch_size)

        # Each fit call gets its own warm-up and decay, fitted to its steps.
        steps = steps_per_epoch or int(dataset.cardinality())
        start_schedule_window(self.optimizer, batches_trained(self.optimizer),
                              steps * max(epochs - initial_epoch, 1))
        dataset, steps_per_epoch = one_iterator(dataset, steps_per_epoch)
        if validation:
            validation_data, kwargs["validation_steps"] = one_iterator(validation_data,
                                                                       kwargs.get("validation_steps"))
        history = super().fit(dataset, epochs=epochs, validation_data=validation_data, verbose=verbose,
                              shuffle=False, steps_per_epoch=steps_per_epoch, initial_epoch=initial_epoch,
                              **kwargs)
        if not self.student.optimizer.built:
            # The student's own optimizer, saved with it: built, so that a
            # `.keras` save of the student loads without a mismatch.
            self.student.optimizer.build(self.student.trainable_variables)
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", **kwargs):
        """The Distiller's losses and the student's accuracy on labelled raw inputs `(x, y)`."""
        if is_tf_dataset(x):  # the validation batches inside `fit`
            return super().evaluate(x, y, batch_size=batch_size, verbose=verbose, **kwargs)
        if kwargs.get("_use_cached_eval_dataset"):
            return super().evaluate(x, y, verbose=verbose, **kwargs)
        if y is None:
            raise ValueError("`evaluate` needs the true labels: evaluate(inputs, labels).")
        require_tensorflow("Distillation on raw inputs")
        from kbert.preprocessing.input_pipeline import examples_dataset

        (examples,) = self.teacher_examples([[(x, y)]], batch_size, verbose)
        dataset = examples_dataset(self.student.preprocessor, examples, batch_size)
        dataset, kwargs["steps"] = one_iterator(dataset, kwargs.get("steps"))
        return super().evaluate(dataset, verbose=verbose, **kwargs)

    def teacher_examples(self, groups, batch_size=None, verbose="auto"):
        """`Examples` for `examples_dataset`, one per group of `(x, y)` (y None: unlabelled).

        Each holds `(features, {"labels", "teacher_logits"})`; the teacher
        predicts on the features of all groups together, in one `predict`.
        Returns None for an empty group.
        """
        from kbert.preprocessing.task_preprocessor import make_examples

        preprocessor = self.student.preprocessor
        if isinstance(self.teacher, Classifier):
            # Checked before the student's preprocessor, which would refuse another form in its own words.
            from kbert.preprocessing.text_packer import split_segments

            forms = {split_segments(x)[1] for group in groups for x, _ in group}
            if len(forms) > 1:
                raise ValueError(ONE_FORM)
            if forms:
                self._check_text_pairs(forms.pop())
        parts = []
        for x, y in (pair for group in groups for pair in group):
            examples = preprocessor.examples(x, y)
            labels = examples.tensors[1] if y is not None else np.full(examples.count, UNLABELED, "int32")
            parts.append((examples.tensors[0], labels.astype("int32")))
        features = _concatenate([features for features, _ in parts])
        logits = np.asarray(self.teacher.predict(features, batch_size=batch_size, verbose=verbose), "float32")

        results, row = [], 0
        for group in groups:
            group_parts, parts = parts[: len(group)], parts[len(group):]
            if not group_parts:
                results.append(None)
                continue
            labels = np.concatenate([labels for _, labels in group_parts])
            targets = {"labels": labels, "teacher_logits": logits[row : row + len(labels)]}
            row += len(labels)
            group_features = _concatenate([features for features, _ in group_parts])
            results.append(make_examples((group_features, targets), len(labels)))
        return results

    def _check_text_pairs(self, pairs):
        """Refuses single texts (`pairs` False) for a teacher of text pairs, and the other way round."""
        if self.teacher.text_pairs is None:
            return
        if pairs != self.teacher.text_pairs:
            kind = {True: "text pairs", False: "single texts"}
            raise ValueError(
                f"The teacher reads {kind[self.teacher.text_pairs]} but the inputs are {kind[pairs]}; "
                "give the Distiller inputs of the form the teacher was fine-tuned on."
            )

    # --- Config ---------------------------------------------------------------------

    def get_config(self):
        config = super().get_config()
        config.update({
            "teacher": keras.saving.serialize_keras_object(self.teacher),
            "student": keras.saving.serialize_keras_object(self.student),
            "temperature": self.temperature,
            "alpha": self.alpha,
        })
        return config


def check_teacher(teacher):
    if not isinstance(teacher, TEACHER_CLASSES):
        supported = " or ".join(f"kbert.{cls.__name__}" for cls in TEACHER_CLASSES)
        raise TypeError(
            f"The teacher must be a fine-tuned {supported} (a task model with one logit per class), "
            f"got {type(teacher).__name__}."
        )


def student_model(teacher, student):
    """The student task model: `student` itself, or one of the teacher's class on an encoder."""
    teacher_class = type(teacher)
    if isinstance(student, Encoder):
        preprocessor = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(teacher.preprocessor)
        )
        if student.vocabulary_size != preprocessor.tokenizer.vocabulary_size():
            raise ValueError(
                f"The student encoder embeds {student.vocabulary_size} tokens but the teacher's "
                f"vocabulary has {preprocessor.tokenizer.vocabulary_size()}; the student must read "
                "the teacher's vocabulary."
            )
        student = teacher_class(student, preprocessor=preprocessor, dropout=teacher.dropout)
    elif not isinstance(student, teacher_class):
        raise TypeError(
            f"The student must be a kbert.Encoder or a kbert.{teacher_class.__name__} like the teacher, "
            f"got {type(student).__name__}."
        )
    check_same_vocabulary(teacher.preprocessor.tokenizer, student.preprocessor.tokenizer)
    teacher_logits, student_logits = teacher.output.shape[-1], student.output.shape[-1]
    if teacher_logits != student_logits:
        raise ValueError(
            f"The teacher gives {teacher_logits} logits per example but the student "
            f"{student_logits}: they must have the same classes (choices)."
        )
    return student


def check_same_vocabulary(teacher_tokenizer, student_tokenizer):
    """Fails clearly when the two tokenizers do not map text to the same token ids."""
    teacher, student = teacher_tokenizer.get_vocabulary(), student_tokenizer.get_vocabulary()
    if type(teacher_tokenizer) is not type(student_tokenizer) or teacher != student:
        differ = next((i for i, (a, b) in enumerate(zip(teacher, student)) if a != b), None)
        where = (
            f"token {differ} is {teacher[differ]!r} for the teacher and {student[differ]!r} for the student"
            if differ is not None
            else f"the teacher has {len(teacher)} tokens, the student {len(student)}"
        )
        raise ValueError(
            "Teacher and student must read the same vocabulary (the same text must give the same "
            f"token ids), but {where}."
        )


def _labels(targets):
    """A batch's labels (flat int32) and a float mask of the labelled ones."""
    labels = ops.reshape(ops.cast(targets["labels"], "int32"), [-1])
    return labels, ops.cast(labels != UNLABELED, "float32")


ONE_FORM = ("The inputs of `x`, `unlabeled` and `validation_data` must be of one form (all single texts, or "
            "all text pairs).")


def _concatenate(features):
    """The features of several inputs, of one form, as one input of that form."""
    first = features[0]
    for other in features[1:]:
        try:
            keras.tree.assert_same_structure(first, other)
        except (ValueError, TypeError):
            raise ValueError(ONE_FORM) from None
    if len(features) == 1:
        return first
    return keras.tree.map_structure(lambda *arrays: np.concatenate(arrays), *features)
