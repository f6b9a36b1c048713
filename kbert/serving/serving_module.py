"""A task model wrapped for TF Serving: raw strings in, named answers out."""

import os
import tempfile

import tensorflow as tf

from kbert.preprocessing.task_preprocessor import MODEL_INPUTS

# Signature names, as clients ask for them (`signature_name` in a request).
SERVING_DEFAULT = "serving_default"
FROM_TOKEN_IDS = "from_token_ids"
FROM_TF_EXAMPLE = "from_tf_example"


class ServingModule(tf.Module):
    """The `tf.Module` that `kbert.export` saves: a task model and its serving signatures.

    It holds the Keras model (its weights become the SavedModel's variables)
    and the vocabulary, as the asset `assets/vocab.txt`. `signatures()`
    gives three concrete functions (`signatures(names)` those named), each
    returning a dict of named tensors:

    - `serving_default`: raw text in (`text`, plus `text_pair` for a
      pair classifier; `question` and `context` for question answering;
      `context` and `choices` for multiple choice), tokenized in the graph
      by the model's own preprocessing;
    - `from_token_ids`: `token_ids`, `segment_ids` and `padding_mask` (int32)
      for clients that tokenize themselves with `assets/vocab.txt`;
    - `from_tf_example`: `examples`, serialized `tf.train.Example`s whose
      string features are named as `serving_default`'s inputs.

    What each signature computes is the task preprocessor's: its
    `serving_inputs`, `serve` and `serve_token_ids` (see
    `kbert.preprocessing.task_preprocessor.TaskPreprocessor`); what each
    task returns is in `kbert.export`'s docstring and in
    `saved_models/README.rst`.

    Args:
        model: a kbert task model (`Classifier`, `Embedder`, `Tagger`,
            `QuestionAnswerer`, `MultipleChoice`).
        text_pairs: for a classifier or embedder, whether `serving_default`
            takes text pairs; default: what the model was trained on.
    """

    def __init__(self, model, text_pairs=None):
        super().__init__(name="kbert_serving")
        preprocessor = getattr(model, "preprocessor", None)
        if not hasattr(preprocessor, "serving_inputs"):
            raise TypeError(
                "kbert.export takes a task model (Classifier, Embedder, Tagger, QuestionAnswerer, "
                f"MultipleChoice), got a {type(model).__name__}."
            )
        # The model is held, not tracked: a tracked Keras model brings its
        # optimizer (AdamW's two slots per weight, twice the weights) and
        # its metrics into the SavedModel. The weights and the preprocessor
        # (its tokenizer's tables) are what serving needs.
        object.__setattr__(self, "model", model)
        self.model_weights = list(model.weights)
        self.preprocessor = preprocessor
        self.text_inputs = preprocessor.serving_inputs(text_pairs)  # fails early on bad text_pairs
        self._vocabulary_folder = tempfile.TemporaryDirectory()
        path = os.path.join(self._vocabulary_folder.name, "vocab.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(preprocessor.tokenizer.get_vocabulary()) + "\n")
        # Copied into the SavedModel's assets/ folder; nothing else refers to
        # this temporary path.
        self.vocabulary_file = tf.saved_model.Asset(path)

    def signatures(self, names=None):
        """`{name: concrete function}` of the three signatures, or of those in `names`.

        Each is traced when asked for: a caller that serves only raw text
        (`SavedModelPredictor.from_keras_model`) traces one graph, not three.
        """
        model, preprocessor = self.model, self.model.preprocessor
        text_specs = [tf.TensorSpec(shape, tf.string, name=name) for name, shape in self.text_inputs]
        id_specs = [tf.TensorSpec(preprocessor.token_ids_shape, tf.int32, name=name) for name in MODEL_INPUTS]

        def from_texts(*texts):
            texts = [
                _checked_rank(text, name, len(shape), _text_meaning(shape))
                for text, (name, shape) in zip(texts, self.text_inputs)
            ]
            return preprocessor.serve(model, *texts)

        def from_token_ids(token_ids, segment_ids, padding_mask):
            rank = len(preprocessor.token_ids_shape)
            token_ids = _checked_rank(token_ids, "token_ids", rank, f"{rank}-D, {_TOKEN_LAYOUTS[rank]}")
            inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
            return preprocessor.serve_token_ids(model, _checked_ids(model, inputs))

        # Serving has no Python control flow on tensors: without AutoGraph's
        # conversion, tracing takes 14-47 % less time by task (the same graphs).
        texts_function = tf.function(from_texts, input_signature=text_specs, autograph=False)

        def from_tf_example(examples):
            examples = _checked_rank(examples, "examples", 1, "a 1-D batch of serialized tf.train.Examples")
            features = {
                name: tf.io.FixedLenFeature(shape[1:], tf.string) for name, shape in self.text_inputs
            }
            parsed = tf.io.parse_example(examples, features)
            # A call of serving_default's own graph, traced once for both.
            return texts_function(*(parsed[name] for name, _ in self.text_inputs))

        functions = {
            SERVING_DEFAULT: texts_function,
            FROM_TOKEN_IDS: tf.function(from_token_ids, input_signature=id_specs, autograph=False),
            FROM_TF_EXAMPLE: tf.function(
                from_tf_example, input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
                autograph=False,
            ),
        }
        unknown = sorted(set(names or ()) - set(functions))
        if unknown:
            raise ValueError(f"Unknown signatures {unknown}; a ServingModule has {sorted(functions)}.")
        return {name: function.get_concrete_function() for name, function in functions.items()
                if names is None or name in names}


_TOKEN_LAYOUTS = {2: "(batch, tokens)", 3: "(batch, choices, tokens)"}


def _text_meaning(shape):
    return f"a {len(shape)}-D batch of strings, one {'per' if len(shape) == 1 else 'row per'} example"


def _checked_rank(value, name, rank, meaning):
    """`value`, checked at run time to have `rank` dimensions (`rank` >= 1).

    Neither a loaded SavedModel nor TF Serving holds a request to the
    signature's declared shape, and `tf.rank` or `tf.debugging.assert_rank`
    fold to that declared rank when traced, so this reads only the run-time
    `tf.shape`: padded with -1s, the dimension at `rank - 1` must be real and
    the one at `rank` padding.
    """
    with tf.name_scope(f"check_rank_of_{name}"):  # the node an error names
        shape = tf.shape(value)
        dims = tf.concat([shape, tf.fill([rank + 1], -1)], 0)
        check = tf.debugging.Assert(
            tf.logical_and(dims[rank - 1] >= 0, dims[rank] < 0),
            [f"{name} must be {meaning}; the shape given:", shape], summarize=16,
        )
        with tf.control_dependencies([check]):
            return tf.identity(value)


def _checked_ids(model, inputs):
    """Token-id inputs, checked so a bad request fails with a message, not an index error."""
    vocabulary_size = model.encoder.vocabulary_size
    max_length = model.encoder.max_sequence_length
    token_ids = inputs["token_ids"]
    checks = [
        tf.debugging.assert_equal(
            tf.shape(token_ids), tf.shape(inputs["segment_ids"]),
            message="token_ids and segment_ids must have the same shape.",
        ),
        tf.debugging.assert_equal(
            tf.shape(token_ids), tf.shape(inputs["padding_mask"]),
            message="token_ids and padding_mask must have the same shape.",
        ),
        tf.debugging.assert_less_equal(
            tf.shape(token_ids)[-1], max_length,
            message=f"Sequences may hold at most {max_length} tokens (the encoder's max_sequence_length).",
        ),
        tf.debugging.assert_non_negative(token_ids, message="token_ids must be >= 0."),
        tf.debugging.assert_less(
            token_ids, vocabulary_size,
            message=f"token_ids must be below the vocabulary size {vocabulary_size}.",
        ),
        tf.debugging.assert_non_negative(inputs["segment_ids"], message="segment_ids must be >= 0."),
        tf.debugging.assert_less(
            inputs["segment_ids"], model.encoder.num_segments,
            message=f"segment_ids must be below {model.encoder.num_segments}.",
        ),
    ]
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in inputs.items()}
