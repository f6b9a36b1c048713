"""Text and text-pair classification on BERT's pooled [CLS] output."""

import keras
import numpy as np

from kbert.models.encoder import Encoder, bert_initializer
from kbert.models.task import Task
from kbert.optimization import bert_adamw
from kbert.preprocessing.preprocessor import Preprocessor


def default_learning_rate(hidden_dim):
    """Peak fine-tuning learning rate: 5e-5 for BERT-base, higher for smaller encoders.

    Small BERTs fine-tune best at larger rates (Turc et al., 2019, searched
    1e-4 to 3e-5); the rate scales with the inverse square root of the width.
    """
    return float(min(5e-5 * (768 / hidden_dim) ** 0.5, 2e-4))


@keras.saving.register_keras_serializable(package="kbert")
class Classifier(Task):
    """Classifies texts or text pairs: spam, sentiment, NLI, paraphrase.

    The encoder's pooled `[CLS]` vector goes through dropout and a dense
    layer that gives one logit per class. `fit`, `evaluate` and `predict`
    take raw text, tokenized by the attached preprocessor in `tf.data`;
    `predict` returns logits (`predict_proba` and `predict_classes` give
    probabilities and class ids).

    The model is compiled with BERT's fine-tuning recipe: AdamW (weight decay
    0.01, none on biases and LayerNorm, gradients clipped to norm 1), a
    learning rate that warms up over the first 10 % of each `fit` call's
    steps and then decays linearly to 0, sparse categorical cross-entropy on
    logits, and accuracy. Call `compile` to change any of it.

    Args:
        encoder: a `kbert.Encoder`.
        num_classes: number of classes.
        preprocessor: a `kbert.Preprocessor` whose tokenizer matches the
            encoder's vocabulary.
        dropout: dropout before the output layer.
        class_names: optional names of the classes, in id order.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> history = clf.fit(["a good film", "a bad film"], [1, 0], epochs=1, verbose=0)
    >>> clf.predict_proba(["good"]).shape
    (1, 2)
    """

    def __init__(self, encoder, num_classes, preprocessor, dropout=0.1, class_names=None, **kwargs):
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        if isinstance(preprocessor, dict):
            preprocessor = keras.saving.deserialize_keras_object(preprocessor)
        if not isinstance(encoder, Encoder):
            raise TypeError(f"`encoder` must be a kbert.Encoder, got {type(encoder).__name__}.")
        if not isinstance(preprocessor, Preprocessor):
            raise TypeError(
                f"`preprocessor` must be a kbert.Preprocessor, got {type(preprocessor).__name__}."
            )
        if int(num_classes) != num_classes or num_classes < 2:
            raise ValueError(f"`num_classes` must be an integer of at least 2, got {num_classes!r}.")
        check_compatible(encoder, preprocessor)
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ValueError(
                    f"Got {len(class_names)} class names for {num_classes} classes: {class_names}."
                )

        # === Layers ===
        self.encoder = encoder
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.token_embedding.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=bert_initializer(),
            dtype=encoder.token_embedding.dtype_policy,
            name="logits",
        )

        # === Functional model ===
        inputs = encoder.input
        pooled = encoder(inputs)["pooled_output"]
        logits = self.output_dense(self.output_dropout(pooled))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.num_classes = int(num_classes)
        self.dropout = dropout
        self.class_names = class_names
        self.compile()

    def compile(self, optimizer="auto", loss="auto", metrics="auto", learning_rate=None, **kwargs):
        """Compiles with BERT's fine-tuning defaults; any argument overrides them.

        Args:
            optimizer: `"auto"` for AdamW with warm-up and linear decay.
            loss: `"auto"` for sparse categorical cross-entropy on logits.
            metrics: `"auto"` for accuracy.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default 5e-5 for BERT-base, more for smaller encoders.
        """
        if optimizer == "auto":
            optimizer = bert_adamw(learning_rate or default_learning_rate(self.encoder.hidden_dim))
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if metrics == "auto":
            metrics = [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def compile_from_config(self, config):
        # Keras skips this for models that override `compile`; ours takes the
        # saved optimizer, loss and metrics as they are.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def check_targets(self, y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[-1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)):
            raise ValueError(
                f"Labels must be a flat list of integer class ids, got dtype {y.dtype} "
                f"and shape {y.shape}."
            )
        bad = np.flatnonzero((y < 0) | (y >= self.num_classes))
        if bad.size:
            raise ValueError(
                f"Labels must be in [0, {self.num_classes}); label {y[bad[0]]} at index "
                f"{bad[0]} is not ({bad.size} such labels in all)."
            )
        return y.astype("int32")

    def predict_proba(self, x, batch_size=None, **kwargs):
        """Class probabilities, shape `(examples, num_classes)`."""
        logits = self.predict(x, batch_size=batch_size, **kwargs)
        logits = logits - logits.max(axis=-1, keepdims=True)
        probabilities = np.exp(logits)
        return probabilities / probabilities.sum(axis=-1, keepdims=True)

    def predict_classes(self, x, batch_size=None, **kwargs):
        """The most likely class id of each example (its name via `class_names`)."""
        return self.predict(x, batch_size=batch_size, **kwargs).argmax(axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_classes": self.num_classes,
                "dropout": self.dropout,
                "class_names": self.class_names,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def check_compatible(encoder, preprocessor):
    """Fails clearly when a preprocessor cannot feed an encoder."""
    vocabulary_size = preprocessor.tokenizer.vocabulary_size()
    if vocabulary_size != encoder.vocabulary_size:
        raise ValueError(
            f"The tokenizer has {vocabulary_size} tokens but the encoder embeds "
            f"{encoder.vocabulary_size}; use the vocabulary the encoder was built for."
        )
    if preprocessor.sequence_length > encoder.max_sequence_length:
        raise ValueError(
            f"`sequence_length` {preprocessor.sequence_length} exceeds the encoder's "
            f"`max_sequence_length` {encoder.max_sequence_length}."
        )
