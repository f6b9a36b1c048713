"""Multiple choice (SWAG-style): pick the choice that best continues or answers a context."""

import keras
import numpy as np
import tensorflow as tf

from kbert.models.encoder import bert_initializer
from kbert.models.task import Task, encoder_and_preprocessor, _as_text_array, _is_preprocessed

# Questions per batch; each is `num_choices` sequences. BERT fine-tuned SWAG with 16.
DEFAULT_BATCH_SIZE = 16
INPUT_NAMES = ("token_ids", "segment_ids", "padding_mask")


@keras.saving.register_keras_serializable(package="kbert")
class MultipleChoice(Task):
    """Scores `num_choices` candidate texts against a context and picks one.

    As BERT does for SWAG (Devlin et al., 2019, section 4.4), each choice is
    packed with its context as a text pair, `[CLS] context [SEP] choice
    [SEP]`, so a batch of `b` questions runs the encoder on `b * num_choices`
    sequences. The pooled `[CLS]` vector of each goes through dropout and a
    dense layer with one output: a score. The scores of a question's choices
    are its logits, shape `(b, num_choices)`; the loss is the softmax
    cross-entropy across them, so the choices compete with each other.

    `fit((contexts, choices), labels)` takes `contexts`, a list of texts,
    `choices`, a list with `num_choices` texts per context, and `labels`,
    the index of the right choice of each. A `tf.data.Dataset` of
    `((context, choices), label)` works too, batched or not. `predict`
    returns the logits, `predict_proba` their softmax and `predict_choice`
    the index of the best choice. `batch_size` counts questions (default
    16).

    The model is compiled as `kbert.Classifier` is: AdamW with warm-up and
    linear decay, sparse categorical cross-entropy on logits, accuracy.

    Args:
        encoder: a `kbert.Encoder`.
        num_choices: choices per question, the same for all.
        preprocessor: a `kbert.Preprocessor` whose tokenizer matches the
            encoder's vocabulary; its `sequence_length` bounds context and
            choice together.
        dropout: dropout before the scoring layer.

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat on the mat", "a dog ran"] * 5, vocabulary_size=60)
    >>> mc = kbert.multiple_choice("tiny", num_choices=2, vocabulary=vocab, sequence_length=16)
    >>> contexts, choices = ["the cat sat"], [["on the mat", "a dog ran"]]
    >>> history = mc.fit((contexts, choices), [0], verbose=0)
    >>> mc.predict((contexts, choices), verbose=0).shape
    (1, 2)
    """

    def __init__(self, encoder, num_choices, preprocessor, dropout=0.1, **kwargs):
        encoder, preprocessor = encoder_and_preprocessor(encoder, preprocessor)
        if int(num_choices) != num_choices or num_choices < 2:
            raise ValueError(f"`num_choices` must be an integer of at least 2, got {num_choices!r}.")
        num_choices = int(num_choices)
        sequence_length = preprocessor.sequence_length

        # === Layers ===
        self.encoder = encoder
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.token_embedding.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            1,
            kernel_initializer=bert_initializer(),
            dtype=encoder.token_embedding.dtype_policy,
            name="choice_score",
        )

        # === Functional model ===
        # Inputs hold every choice of a question: (batch, num_choices, sequence_length).
        inputs = {
            name: keras.Input(shape=(num_choices, sequence_length), dtype="int32", name=name)
            for name in INPUT_NAMES
        }
        # The encoder sees one sequence per choice.
        flat = {name: keras.ops.reshape(value, (-1, sequence_length)) for name, value in inputs.items()}
        pooled = encoder(flat)["pooled_output"]
        scores = self.output_dense(self.output_dropout(pooled))
        logits = keras.ops.reshape(scores, (-1, num_choices))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.num_choices = num_choices
        self.dropout = dropout
        self.compile()

    def check_targets(self, y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[-1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(
                f"Labels must be a flat list of choice indices, got dtype {y.dtype} and shape {y.shape}."
            )
        bad = np.flatnonzero((y < 0) | (y >= self.num_choices))
        if bad.size:
            raise ValueError(
                f"Labels must be choice indices in [0, {self.num_choices}); label {y[bad[0]]} at "
                f"index {bad[0]} is not ({bad.size} such labels in all)."
            )
        return y.astype("int32")

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("With a tf.data.Dataset, put labels in the dataset, not in `y`.")
            dataset = x
            if _is_preprocessed(dataset.element_spec):
                return dataset  # Keras' own evaluate inside fit, for one.
            spec = dataset.element_spec
            labelled = isinstance(spec, tuple) and isinstance(spec[0], tuple)
            self._check_features_spec(spec[0] if labelled else spec)
            if (spec[0] if labelled else spec)[0].shape.rank == 0:
                dataset = dataset.batch(batch_size)
        else:
            contexts, choices = self._check_features(x)
            parts = [(contexts, choices)]
            if y is not None:
                y = self.check_targets(y)
                if len(y) != len(contexts):
                    raise ValueError(f"Got {len(contexts)} contexts but {len(y)} labels.")
                parts.append(y)
            if sample_weight is not None:
                sample_weight = np.asarray(sample_weight, dtype="float32")
                if len(sample_weight) != len(contexts):
                    raise ValueError(
                        f"Got {len(contexts)} contexts but {len(sample_weight)} sample weights."
                    )
                parts.append(sample_weight)
            labelled = len(parts) > 1
            dataset = tf.data.Dataset.from_tensor_slices(tuple(parts) if labelled else parts[0])
            if shuffle:
                dataset = dataset.shuffle(len(contexts), reshuffle_each_iteration=True)
            dataset = dataset.batch(batch_size)

        if labelled:
            mapped = dataset.map(
                lambda features, *rest: (self._pack(*features), *rest),
                num_parallel_calls=tf.data.AUTOTUNE,
            )
        else:
            mapped = dataset.map(self._pack, num_parallel_calls=tf.data.AUTOTUNE)
        return mapped.prefetch(tf.data.AUTOTUNE)

    def _pack(self, contexts, choices):
        """`(batch,)` contexts and `(batch, num_choices)` choices to the model's inputs."""
        tf.debugging.assert_equal(
            tf.shape(choices)[-1],
            self.num_choices,
            message=f"Each context needs exactly num_choices={self.num_choices} choices.",
        )
        # Row-major: context i repeated for its choices i*C ... i*C + C - 1.
        repeated = tf.repeat(contexts, self.num_choices)
        packed = self.preprocessor((repeated, tf.reshape(choices, [-1])))
        shape = [-1, self.num_choices, self.preprocessor.sequence_length]
        return {name: tf.reshape(value, shape) for name, value in packed.items()}

    def _check_features(self, x):
        """`(contexts, choices)` as string arrays of shape `(n,)` and `(n, num_choices)`."""
        if not isinstance(x, (tuple, list)) or len(x) != 2 or isinstance(x[0], (str, bytes)):
            raise TypeError(
                "Multiple-choice input is a tuple (contexts, choices): a list of texts and a list "
                "with num_choices texts per context."
            )
        contexts = _as_text_array(x[0])
        choices = list(x[1])
        if len(choices) != len(contexts):
            raise ValueError(f"Got {len(contexts)} contexts but {len(choices)} lists of choices.")
        for i, row in enumerate(choices):
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
                raise TypeError(f"The choices of example {i} must be a list of texts, got {row!r}.")
            if len(row) != self.num_choices:
                raise ValueError(
                    f"Example {i} has {len(row)} choices; this model takes num_choices="
                    f"{self.num_choices}."
                )
        flat = _as_text_array([text for row in choices for text in row])
        return contexts, flat.reshape(len(contexts), self.num_choices)

    def _check_features_spec(self, spec):
        if not (
            isinstance(spec, tuple)
            and len(spec) == 2
            and all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec)
            and spec[1].shape.rank == spec[0].shape.rank + 1
        ):
            raise ValueError(
                "A multiple-choice dataset holds ((context, choices), label) or (context, choices): "
                f"a string and a vector of num_choices strings; got {spec}."
            )
        if spec[1].shape[-1] is not None and spec[1].shape[-1] != self.num_choices:
            raise ValueError(
                f"The dataset has {spec[1].shape[-1]} choices per context; this model takes "
                f"num_choices={self.num_choices}."
            )

    def predict_proba(self, x, batch_size=None, **kwargs):
        """The probability of each choice, shape `(examples, num_choices)`."""
        logits = self.predict(x, batch_size=batch_size, **kwargs).astype("float64")
        logits = logits - logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        return probabilities / probabilities.sum(axis=-1, keepdims=True)

    def predict_choice(self, x, batch_size=None, **kwargs):
        """The index of the best choice of each example."""
        return self.predict(x, batch_size=batch_size, **kwargs).argmax(axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_choices": self.num_choices,
                "dropout": self.dropout,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
