"""A task model wrapped for TF Serving: raw strings in, named answers out."""

import os
import tempfile

import tensorflow as tf

from kbert.models.task import _cut_padding

MODEL_INPUTS = ("token_ids", "segment_ids", "padding_mask")
# Signature names, as clients ask for them (`signature_name` in a request).
SERVING_DEFAULT = "serving_default"
FROM_TOKEN_IDS = "from_token_ids"
FROM_TF_EXAMPLE = "from_tf_example"


class ServingModule(tf.Module):
    """The `tf.Module` that `kbert.export` saves: a task model and its serving signatures.

    It holds the Keras model (its weights become the SavedModel's variables)
    and the vocabulary, as the asset `assets/vocab.txt`. `signatures()`
    gives three concrete functions, each returning a dict of named tensors:

    - `serving_default`: raw text in (`text`, plus `text_pair` for a
      pair classifier; `question` and `context` for question answering;
      `context` and `choices` for multiple choice), tokenized in the graph
      by the model's own preprocessing;
    - `from_token_ids`: `token_ids`, `segment_ids` and `padding_mask` (int32)
      for clients that tokenize themselves with `assets/vocab.txt`;
    - `from_tf_example`: `examples`, serialized `tf.train.Example`s whose
      string features are named as `serving_default`'s inputs.

    What each task returns is in `kbert.export`'s docstring and in
    `saved_models/README.rst`.

    Args:
        model: a `kbert.Classifier`, `Embedder`, `Tagger`,
            `QuestionAnswerer` or `MultipleChoice`.
        text_pairs: for a classifier or embedder, whether `serving_default`
            takes text pairs; default: what the model was trained on.
    """

    def __init__(self, model, text_pairs=None):
        super().__init__(name="kbert_serving")
        self.model = model
        self.task = _task_for(model, text_pairs)
        self._vocabulary_folder = tempfile.TemporaryDirectory()
        path = os.path.join(self._vocabulary_folder.name, "vocab.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(model.preprocessor.tokenizer.get_vocabulary()) + "\n")
        # Copied into the SavedModel's assets/ folder; nothing else refers to
        # this temporary path.
        self.vocabulary_file = tf.saved_model.Asset(path)

    def signatures(self):
        """`{name: concrete function}` of the three signatures."""
        task = self.task
        text_specs = [tf.TensorSpec(shape, tf.string, name=name) for name, shape in task.text_inputs]
        id_specs = [tf.TensorSpec(task.ids_shape, tf.int32, name=name) for name in MODEL_INPUTS]

        def from_texts(*texts):
            return task.from_texts(*texts)

        def from_token_ids(token_ids, segment_ids, padding_mask):
            inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
            return task.from_ids(_checked_ids(self.model, inputs))

        def from_tf_example(examples):
            features = {
                name: tf.io.FixedLenFeature(shape[1:], tf.string) for name, shape in task.text_inputs
            }
            parsed = tf.io.parse_example(examples, features)
            return task.from_texts(*(parsed[name] for name, _ in task.text_inputs))

        return {
            SERVING_DEFAULT: tf.function(from_texts, input_signature=text_specs).get_concrete_function(),
            FROM_TOKEN_IDS: tf.function(from_token_ids, input_signature=id_specs).get_concrete_function(),
            FROM_TF_EXAMPLE: tf.function(
                from_tf_example, input_signature=[tf.TensorSpec([None], tf.string, name="examples")]
            ).get_concrete_function(),
        }


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


def _probabilities(logits):
    return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)


class _ClassifierTask:
    def __init__(self, model, text_pairs):
        self.model = model
        self.text_inputs = [("text", [None])] + ([("text_pair", [None])] if text_pairs else [])
        self.ids_shape = [None, None]

    def from_texts(self, *texts):
        inputs = self.model.preprocessor(tuple(texts) if len(texts) > 1 else texts[0])
        # Each request batch is padded to its longest text only.
        return self.from_ids(_cut_padding(inputs))

    def from_ids(self, inputs):
        probabilities = _probabilities(self.model(inputs, training=False))
        label_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        outputs = {"probabilities": probabilities, "label_ids": label_ids}
        if self.model.class_names:
            outputs["labels"] = tf.gather(tf.constant(self.model.class_names), label_ids)
        return outputs


class _EmbedderTask(_ClassifierTask):
    def from_ids(self, inputs):
        return {"sentence_embedding": self.model(inputs, training=False)["sentence_embedding"]}


class _TaggerTask:
    def __init__(self, model):
        self.model = model
        self.text_inputs = [("text", [None])]
        self.ids_shape = [None, None]

    def from_texts(self, texts):
        """Splits each text into words, as the tokenizer does, and tags every word."""
        model = self.model
        tokenizer = model.preprocessor.tokenizer
        texts, _ = tokenizer._batch(texts)
        words, byte_starts, byte_ends, _ = tokenizer._split_words(texts)
        no_words = tf.equal(tf.size(words.flat_values), 0)
        logits = tf.cond(
            no_words,
            lambda: tf.zeros([0, model.num_labels], tf.float32),
            lambda: model._word_logits(words),
        )
        probabilities = _probabilities(logits)
        tag_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)

        def per_text(flat, default):
            return words.with_flat_values(flat).to_tensor(default_value=default)

        # Character offsets: how many characters of the text start before the
        # word's byte offset (a search per text, linear in its length).
        _, char_byte_starts = tf.strings.unicode_split_with_offsets(texts, "UTF-8")
        char_byte_starts = char_byte_starts.to_tensor(default_value=tf.int64.max)
        char_byte_starts = tf.pad(char_byte_starts, [[0, 0], [0, 1]], constant_values=tf.int64.max)

        def characters_before(byte_offsets):
            # A padding column on both sides keeps the search valid for empty batches.
            offsets = tf.pad(byte_offsets.to_tensor(), [[0, 0], [0, 1]])
            counts = tf.searchsorted(char_byte_starts, offsets, side="left")[:, :-1]
            return tf.RaggedTensor.from_tensor(counts, lengths=byte_offsets.row_lengths()).flat_values

        char_starts = tf.cast(characters_before(byte_starts), tf.int32)
        char_ends = tf.cast(characters_before(byte_ends), tf.int32)
        return {
            "words": per_text(words.flat_values, ""),
            "tags": per_text(tf.gather(tf.constant(model.labels), tag_ids), ""),
            "tag_ids": per_text(tag_ids, -1),
            "scores": per_text(tf.reduce_max(probabilities, axis=-1), 0.0),
            "word_starts": per_text(char_starts, -1),
            "word_ends": per_text(char_ends, -1),
            "word_counts": tf.cast(words.row_lengths(), tf.int32),
        }

    def from_ids(self, inputs):
        probabilities = _probabilities(self.model(inputs, training=False))
        tag_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {
            "tag_ids": tag_ids,
            "tags": tf.gather(tf.constant(self.model.labels), tag_ids),
            "probabilities": probabilities,
        }


class _QuestionAnswererTask:
    OUTPUTS = ("text", "start", "end", "score", "candidate_texts", "candidate_starts",
               "candidate_ends", "candidate_scores", "candidate_counts")

    def __init__(self, model):
        self.model = model
        self.text_inputs = [("question", [None]), ("context", [None])]
        self.ids_shape = [None, None]

    def from_texts(self, questions, contexts):
        answers = self.model._answer(questions, contexts)
        return {name: answers[name] for name in self.OUTPUTS}

    def from_ids(self, inputs):
        outputs = self.model(inputs, training=False)
        return {name: tf.cast(outputs[name], tf.float32) for name in ("start_logits", "end_logits")}


class _MultipleChoiceTask:
    def __init__(self, model):
        self.model = model
        self.text_inputs = [("context", [None]), ("choices", [None, model.num_choices])]
        self.ids_shape = [None, model.num_choices, model.preprocessor.sequence_length]

    def from_texts(self, contexts, choices):
        return self.from_ids(self.model._pack(contexts, choices))

    def from_ids(self, inputs):
        probabilities = _probabilities(self.model(inputs, training=False))
        return {
            "probabilities": probabilities,
            "choice_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int32),
        }


def _task_for(model, text_pairs):
    from kbert.models.classifier import Classifier
    from kbert.models.embedder import Embedder
    from kbert.models.multiple_choice import MultipleChoice
    from kbert.models.question_answerer import QuestionAnswerer
    from kbert.models.tagger import Tagger

    if isinstance(model, (Classifier, Embedder)):
        if text_pairs is None:
            text_pairs = model.text_pairs
        if text_pairs is None:
            if isinstance(model, Embedder):
                text_pairs = False  # an embedder is used on single texts unless told
            else:
                raise ValueError(
                    "This classifier has not seen any text yet, so it is not known whether it reads "
                    "single texts or pairs; pass text_pairs=False or text_pairs=True."
                )
        task = _EmbedderTask if isinstance(model, Embedder) else _ClassifierTask
        return task(model, text_pairs)
    if text_pairs:
        raise ValueError(f"`text_pairs` applies to classifiers and embedders, not to a {type(model).__name__}.")
    if isinstance(model, Tagger):
        return _TaggerTask(model)
    if isinstance(model, QuestionAnswerer):
        return _QuestionAnswererTask(model)
    if isinstance(model, MultipleChoice):
        return _MultipleChoiceTask(model)
    raise TypeError(
        "kbert.export takes a task model (Classifier, Embedder, Tagger, QuestionAnswerer, "
        f"MultipleChoice), got a {type(model).__name__}."
    )
