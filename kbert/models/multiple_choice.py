"""Multiple choice (SWAG-style): pick the choice that best continues or answers a context."""

import keras
import numpy as np

from kbert.models.task_model import TaskModel, deprecated, encoder_and_preprocessor, head_setting, output_head


@keras.saving.register_keras_serializable(package="kbert")
class MultipleChoice(TaskModel):
    """Scores `num_choices` candidate texts against a context and picks one.

    As BERT does for SWAG (Devlin et al., 2019, section 4.4), each choice is
    packed with its context as a text pair, `[CLS] context [SEP] choice
    [SEP]` (see `kbert.MultipleChoicePreprocessor`), so a batch of `b`
    questions runs the encoder on `b * num_choices` sequences. The pooled
    `[CLS]` vector of each goes through dropout and a dense layer with one
    output: a score. The scores of a question's choices are its logits,
    shape `(b, num_choices)`; the loss is the softmax cross-entropy across
    them, so the choices compete with each other.

    `fit((contexts, choices), labels)` takes `contexts`, a list of texts,
    `choices`, a list with `num_choices` texts per context, and `labels`,
    the index of the right choice of each. A `tf.data.Dataset` of
    `((context, choices), label)` works too, batched or not. `predict`
    returns the logits, `predict_proba` their softmax and `choose` the index
    of the best choice. `batch_size` counts questions (default 16).

    The model is compiled as `kbert.Classifier` is: AdamW with warm-up and
    linear decay, sparse categorical cross-entropy on logits, accuracy.

    Args:
        encoder: a `kbert.Encoder`.
        num_choices: choices per question, the same for all (or None when
            `preprocessor` is a `kbert.MultipleChoicePreprocessor`).
        preprocessor: a `kbert.MultipleChoicePreprocessor`, or a
            `kbert.TextPacker` whose tokenizer matches the encoder's
            vocabulary (wrapped into one).
        dropout: dropout before the scoring layer.

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat on the mat", "a dog ran"] * 5, vocabulary_size=60, verbose=False)
    >>> mc = kbert.multiple_choice("tiny", num_choices=2, vocabulary=vocab, sequence_length=16)
    >>> contexts, choices = ["the cat sat"], [["on the mat", "a dog ran"]]
    >>> history = mc.fit((contexts, choices), [0], verbose=0)
    >>> mc.predict((contexts, choices), verbose=0).shape
    (1, 2)
    >>> mc.choose((contexts, choices)).shape
    (1,)
    """

    def __init__(self, encoder, num_choices=None, preprocessor=None, dropout=0.1, **kwargs):
        kwargs.pop("text_pairs", None)  # saved by earlier versions
        encoder, preprocessor = encoder_and_preprocessor(
            encoder, preprocessor, _multiple_choice_preprocessor, num_choices=num_choices
        )
        num_choices = int(head_setting(preprocessor, "num_choices", num_choices))

        # === Layers ===
        self.encoder = encoder
        self.output_dropout, self.output_dense = output_head(encoder, 1, "choice_score", dropout=dropout)

        # === Functional model ===
        # Inputs hold every choice of a question: (batch, num_choices, length),
        # the length up to the preprocessor's `sequence_length` (a serving
        # request is cut to its longest sequence).
        inputs = {
            name: keras.Input(shape=(num_choices, None), dtype="int32", name=name) for name in encoder.input
        }
        # The encoder sees one sequence per choice, first choices first:
        # (num_choices * batch, length), whatever the length.
        flat = {
            name: keras.ops.concatenate([value[:, choice] for choice in range(num_choices)], axis=0)
            for name, value in inputs.items()
        }
        pooled = encoder(flat)["pooled_output"]
        scores = self.output_dense(self.output_dropout(pooled))  # (num_choices * batch, 1)
        logits = keras.ops.transpose(keras.ops.reshape(scores, (num_choices, -1)))
        super().__init__(inputs=inputs, outputs=logits, preprocessor=preprocessor, **kwargs)

        # === Config ===
        self.dropout = dropout
        self._num_choices = num_choices
        self.compile()

    def packed_call(self, inputs, training=None):
        """Logits `(examples, num_choices)` for a packed batch: each choice's `[CLS]` vector, pooled and scored.

        The packed sequences are the choices row-major (`kbert.preprocessing.packing.pack_batch`).
        """
        pooled = self.encoder.packed_pooled_output(inputs, training=training)
        scores = self.output_dense(self.output_dropout(pooled, training=training))
        return keras.ops.reshape(scores, (-1, self.num_choices))

    @property
    def num_choices(self):
        return self._num_choices

    def choose(self, x, batch_size=None, verbose=0):
        """The index of the best choice of each example."""
        return self.predict(x, batch_size=batch_size, verbose=verbose).argmax(axis=-1)

    def evaluate_report(self, x, y, batch_size=None, verbose=0):
        """`accuracy` (the share of examples whose best choice is the right one) and `num_examples`."""
        truth = np.asarray(y).reshape(-1)
        chosen = self.choose(x, batch_size=batch_size, verbose=verbose)
        if len(truth) != len(chosen):
            raise ValueError(f"Got {len(chosen)} examples but {len(truth)} labels.")
        if len(truth) == 0:
            raise ValueError("Got no examples to score.")
        return {"accuracy": float(np.mean(chosen == truth)), "num_examples": int(len(truth))}

    def predict_choice(self, x, batch_size=None, **kwargs):
        """Deprecated: use `choose`."""
        deprecated("MultipleChoice.predict_choice", "choose")
        return self.predict(x, batch_size=batch_size, **kwargs).argmax(axis=-1)

    def get_config(self):
        config = super().get_config()
        config["dropout"] = self.dropout
        if self.preprocessor is None:  # else the preprocessor holds it
            config["num_choices"] = self.num_choices
        return config


def _multiple_choice_preprocessor():
    from kbert.preprocessing.multiple_choice_preprocessor import MultipleChoicePreprocessor

    return MultipleChoicePreprocessor
