"""The multiple-choice task preprocessor: a context and its choices in, the best choice out."""

import keras
import tensorflow as tf

from kbert.preprocessing.task_preprocessor import (
    TaskPreprocessor,
    as_text_array,
    check_class_ids,
    check_sample_weight,
    make_examples,
    probabilities,
)


@keras.saving.register_keras_serializable(package="kbert")
class MultipleChoicePreprocessor(TaskPreprocessor):
    """Packs each choice with its context, as BERT does for SWAG; logits to the chosen index.

    Forward: `contexts` `(batch,)` and `choices` `(batch, num_choices)` give
    model inputs of shape `(batch, num_choices, sequence_length)`, each row
    `[CLS] context [SEP] choice [SEP]` (the longer text is cut first);
    labels are the index of the right choice. Reverse: `reverse(logits)`
    gives `probabilities` and `choice_ids`. A serving request is cut to its
    longest sequences: questions of similar length run together, each run
    padded to its longest context and choice.

    Raw examples for `fit` are a tuple `(contexts, choices)`: a list of
    texts and a list with `num_choices` texts per context; or a
    `tf.data.Dataset` of `((context, choices), label)` or `(context,
    choices)`, batched or not.

    Args:
        packer: a `kbert.TextPacker`; its `sequence_length` bounds context
            and choice together.
        num_choices: choices per question, the same for all.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "ran"]
    >>> packer = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=8)
    >>> preprocessor = kbert.MultipleChoicePreprocessor(packer, num_choices=2)
    >>> inputs = preprocessor((["the cat"], [["sat", "ran"]]))
    >>> inputs["token_ids"].numpy().tolist()
    [[[2, 5, 6, 3, 7, 3, 0, 0], [2, 5, 6, 3, 8, 3, 0, 0]]]
    """

    # Questions per batch; each is `num_choices` sequences. BERT fine-tuned SWAG with 16.
    default_batch_size = 16
    # Inputs keep one shape, `(batch, num_choices, sequence_length)`.
    pads_to_longest = False
    # Packed, each choice is a sequence of its own (`kbert.preprocessing.packing.pack_batch`).
    packs_examples = True

    def __init__(self, packer, num_choices=4, **kwargs):
        kwargs.pop("text_pairs", None)  # always context and choice
        super().__init__(packer, text_pairs=True, **kwargs)
        if isinstance(num_choices, bool) or int(num_choices) != num_choices or num_choices < 2:
            raise ValueError(f"`num_choices` must be an integer of at least 2, got {num_choices!r}.")
        self.num_choices = int(num_choices)

    # --- Forward ------------------------------------------------------------------

    def examples(self, x, y=None, sample_weight=None):
        contexts, choices = self._check_features(x)
        parts = [(contexts, choices)]
        if y is not None:
            y = self.check_targets(y)
            if len(y) != len(contexts):
                raise ValueError(f"Got {len(contexts)} contexts but {len(y)} labels.")
            parts.append(y)
        if sample_weight is not None:
            parts.append(check_sample_weight(sample_weight, len(contexts), "contexts"))
        return make_examples(tuple(parts), len(contexts))

    def check_targets(self, y):
        return check_class_ids(y, self.num_choices, what="choice indices", range_prefix="choice indices ")

    def batch_dataset(self, dataset, batch_size):
        spec = dataset.element_spec
        labelled = isinstance(spec, tuple) and isinstance(spec[0], tuple)
        features = spec[0] if labelled else spec
        self._check_features_spec(features)
        if features[0].shape.rank == 0:
            dataset = dataset.batch(batch_size)
        if not labelled:
            dataset = dataset.map(lambda contexts, choices: ((contexts, choices),))
        return dataset

    def forward_batch(self, features, *rest):
        contexts, choices = features
        tf.debugging.assert_equal(
            tf.shape(choices)[-1],
            self.num_choices,
            message=f"Each context needs exactly num_choices={self.num_choices} choices.",
        )
        # Row-major: context i repeated for its choices i*C ... i*C + C - 1.
        repeated = tf.repeat(contexts, self.num_choices)
        packed = self.packer((repeated, tf.reshape(choices, [-1])))
        shape = [-1, self.num_choices, self.sequence_length]
        inputs = {name: tf.reshape(value, shape) for name, value in packed.items()}
        return (inputs, *rest) if rest else inputs

    def _check_features(self, x):
        """`(contexts, choices)` as string arrays of shape `(n,)` and `(n, num_choices)`."""
        if not isinstance(x, (tuple, list)) or len(x) != 2 or isinstance(x[0], (str, bytes)):
            raise TypeError(
                "Multiple-choice input is a tuple (contexts, choices): a list of texts and a list "
                "with num_choices texts per context."
            )
        contexts = as_text_array(x[0])
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
        flat = as_text_array([text for row in choices for text in row])
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

    # --- Reverse and serving --------------------------------------------------------

    def reverse(self, logits):
        """`probabilities` `(batch, num_choices)` and the best `choice_ids`."""
        probs = probabilities(logits)
        return {"probabilities": probs, "choice_ids": tf.argmax(probs, axis=-1, output_type=tf.int32)}

    def serving_inputs(self, text_pairs=None):
        if text_pairs:
            raise ValueError("`text_pairs` applies to classifiers and embedders.")
        return [("context", [None]), ("choices", [None, self.num_choices])]

    @property
    def token_ids_shape(self):
        return [None, self.num_choices, self.sequence_length]

    def serve(self, model, contexts, choices):
        return self.serve_token_ids(model, self.forward_batch((contexts, choices)))

    def get_config(self):
        config = super().get_config()
        del config["text_pairs"]
        config["num_choices"] = self.num_choices
        return config
