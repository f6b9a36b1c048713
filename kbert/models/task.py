"""Base class of kbert's task models: Keras models that take raw text."""

import keras
import numpy as np
import tensorflow as tf

from kbert.optimization import bert_adamw, default_learning_rate, start_schedule_window
from kbert.preprocessing.preprocessor import split_segments

DEFAULT_BATCH_SIZE = 32
# Training batches are cut from groups of this many batches sorted by length
# (similar lengths share a batch, so little of each batch is padding).
LENGTH_GROUP_BATCHES = 50
# Batches are padded to their longest example rounded up to this multiple.
PAD_TO_MULTIPLE = 8


def _num_examples(x):
    segments, _ = split_segments(x)
    lengths = {len(s) for s in segments}
    if len(lengths) != 1:
        raise ValueError(f"The texts of a pair must be as many, got {sorted(lengths)}.")
    return lengths.pop()


def _as_text_array(texts):
    if isinstance(texts, (str, bytes)):
        raise TypeError("Expected a list or array of texts, got a single string; wrap it in a list.")
    array = np.asarray(texts, dtype=object)
    if array.ndim != 1:
        raise ValueError(f"Texts must be a flat list, got an array of shape {array.shape}.")
    for i, text in enumerate(array):
        if not isinstance(text, (str, bytes)):
            raise TypeError(f"Text {i} is a {type(text).__name__}, not a string: {text!r}.")
    return array.astype(bytes) if array.size and isinstance(array[0], bytes) else array.astype(str)


class FreezesUnusedPooler:
    """Mixin for models on an encoder: when `uses_pooler` is False, the pooler is not trained.

    Models whose outputs do not come from the pooled `[CLS]` vector would
    give the pooler no gradient (Keras warns about every step); its weights
    count as non-trainable instead, and stay as they are.
    """

    uses_pooler = True

    def _is_pooler(self, weight):
        return not self.uses_pooler and any(weight is p for p in self.encoder.pooler_dense.weights)

    @property
    def trainable_weights(self):
        return [w for w in super().trainable_weights if not self._is_pooler(w)]

    @property
    def trainable_variables(self):
        return [v for v in super().trainable_variables if not self._is_pooler(v)]

    @property
    def non_trainable_weights(self):
        frozen = [w for w in super().trainable_weights if self._is_pooler(w)]
        return super().non_trainable_weights + frozen

    @property
    def non_trainable_variables(self):
        frozen = [v for v in super().trainable_variables if self._is_pooler(v)]
        return super().non_trainable_variables + frozen


class Task(FreezesUnusedPooler, keras.Model):
    """A functional Keras model with its `Preprocessor` attached.

    `fit`, `evaluate` and `predict` take raw strings: lists or NumPy arrays of
    texts, `(texts_a, texts_b)` tuples of pairs, or a `tf.data.Dataset` of
    texts (or `(texts, labels)`), batched or not. The text is tokenized in a
    `tf.data` pipeline (batched, in parallel, prefetched) so the model itself
    only sees token ids. Subclasses build the functional graph and call
    `super().__init__(inputs=..., outputs=..., preprocessor=...)`.

    Models whose outputs do not depend on how much padding follows the text
    set `pads_to_longest = True`: each batch is then padded only to its
    longest example (rounded up to a multiple of 8), not to the
    preprocessor's `sequence_length`, and `fit` on shuffled texts draws each
    batch from texts of similar length (sorted within groups of 50 batches,
    the batches then shuffled). Predictions are the same as with full
    padding; a short-text data set trains several times faster.
    """

    pads_to_longest = False

    def __init__(self, *args, preprocessor=None, text_pairs=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor
        # Whether the model reads single texts or text pairs: recorded from the
        # first texts it is given (and saved), so an export knows its inputs.
        self.text_pairs = None if text_pairs is None else bool(text_pairs)

    def _record_text_pairs(self, is_pair):
        if self.text_pairs is None:
            self.text_pairs = bool(is_pair)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", learning_rate=None, **kwargs):
        """Compiles with BERT's fine-tuning defaults; any argument overrides them.

        Args:
            optimizer: `"auto"` for AdamW (weight decay 0.01, none on biases
                and LayerNorm, gradients clipped to norm 1) with warm-up and
                linear decay.
            loss: `"auto"` for the task's loss (see the model's docstring).
            metrics: `"auto"` for the task's metrics.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default 5e-5 for BERT-base, more for smaller encoders.
        """
        if optimizer == "auto":
            optimizer = bert_adamw(learning_rate or default_learning_rate(self.encoder.hidden_dim))
        if loss == "auto":
            loss = self.default_loss()
        if metrics == "auto":
            metrics = self.default_metrics(kwargs)
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def default_loss(self):
        """The `"auto"` loss: sparse categorical cross-entropy on logits."""
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self, compile_kwargs):
        """The `"auto"` metrics: accuracy. May set other `compile` arguments."""
        return [keras.metrics.SparseCategoricalAccuracy("accuracy")]

    # Targets: subclasses check labels before any training step runs.
    def check_targets(self, y):
        return y

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        group_by_length = False
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("With a tf.data.Dataset, put labels in the dataset, not in `y`.")
            dataset = x
            if _is_preprocessed(dataset.element_spec):
                return dataset  # Keras' own evaluate inside fit, for one.
            first = dataset.element_spec
            first = first[0] if isinstance(first, tuple) and not _is_pair_spec(first) else first
            self._record_text_pairs(_is_pair_spec(first))
            first = split_segments(first)[0][0]
            if first.shape.rank == 0:
                dataset = dataset.batch(batch_size)
        else:
            segments, is_pair = split_segments(x)
            self._record_text_pairs(is_pair)
            segments = [_as_text_array(s) for s in segments]
            count = _num_examples(segments)
            features = tuple(segments) if is_pair else segments[0]
            parts = [features]
            if y is not None:
                y = self.check_targets(np.asarray(y))
                if len(y) != count:
                    raise ValueError(f"Got {count} texts but {len(y)} labels.")
                parts.append(y)
            if sample_weight is not None:
                sample_weight = np.asarray(sample_weight, dtype="float32")
                if len(sample_weight) != count:
                    raise ValueError(f"Got {count} texts but {len(sample_weight)} sample weights.")
                parts.append(sample_weight)
            dataset = tf.data.Dataset.from_tensor_slices(tuple(parts) if len(parts) > 1 else features)
            if shuffle:
                dataset = dataset.shuffle(count, reshuffle_each_iteration=True)
            group_by_length = shuffle and self.pads_to_longest
            dataset = dataset.batch(batch_size * (LENGTH_GROUP_BATCHES if group_by_length else 1))

        def preprocess(features, *rest):
            features = self.preprocessor(features)
            return (features, *rest) if rest else features

        if _is_pair_spec(dataset.element_spec):
            # tf.data passes a tuple element as separate arguments.
            mapped = dataset.map(lambda a, b: preprocess((a, b)), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            mapped = dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        if self.pads_to_longest:
            if group_by_length:
                mapped = sort_into_batches(mapped, _padding_lengths, batch_size)
            mapped = mapped.map(_cut_padding, num_parallel_calls=tf.data.AUTOTUNE)
            if group_by_length:
                mapped = shuffle_batches(mapped, batch_size, count)
        return mapped.prefetch(tf.data.AUTOTUNE)

    def fit(
        self,
        x=None,
        y=None,
        batch_size=None,
        epochs=1,
        validation_data=None,
        sample_weight=None,
        shuffle=True,
        steps_per_epoch=None,
        initial_epoch=0,
        **kwargs,
    ):
        dataset = self._dataset(x, y, sample_weight, batch_size, shuffle=shuffle)
        if validation_data is not None:
            validation_data = self._validation_dataset(validation_data, batch_size)
        self._start_learning_rate_window(dataset, steps_per_epoch, epochs - initial_epoch)
        return super().fit(
            dataset,
            epochs=epochs,
            validation_data=validation_data,
            shuffle=False,  # `_dataset` shuffles the texts itself.
            steps_per_epoch=steps_per_epoch,
            initial_epoch=initial_epoch,
            **kwargs,
        )

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        dataset = self._dataset(x, y, sample_weight, batch_size)
        return super().evaluate(dataset, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        return super().predict(self._dataset(x, batch_size=batch_size), **kwargs)

    def _validation_dataset(self, validation_data, batch_size):
        if isinstance(validation_data, tf.data.Dataset):
            return self._dataset(validation_data, batch_size=batch_size)
        if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
            raise ValueError("`validation_data` must be (texts, labels), (texts, labels, weights) or a tf.data.Dataset.")
        return self._dataset(*validation_data, batch_size=batch_size)

    def _start_learning_rate_window(self, dataset, steps_per_epoch, epochs):
        """Fits each `fit` call's warm-up and decay to the steps it will run."""
        steps = steps_per_epoch
        if steps is None:
            cardinality = int(dataset.cardinality())
            steps = cardinality if cardinality > 0 else None
        total = None if steps is None else steps * max(epochs, 1)
        start_schedule_window(self.optimizer, int(self.optimizer.iterations.numpy()), total)

    def compile_from_config(self, config):
        # Keras skips this for models that override `compile`; ours takes the
        # saved optimizer, loss and metrics as they are.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
            "text_pairs": self.text_pairs,
        }


def encoder_and_preprocessor(encoder, preprocessor):
    """A task's encoder and preprocessor (deserialized when they come as config dicts), checked to fit."""
    from kbert.models.encoder import Encoder
    from kbert.preprocessing.preprocessor import Preprocessor

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
    check_compatible(encoder, preprocessor)
    return encoder, preprocessor


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


def padded_length(longest):
    """The width a batch is padded to: its longest example, rounded up to `PAD_TO_MULTIPLE`."""
    return -(-longest // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE


def _padding_lengths(features, *rest):
    return tf.reduce_sum(features["padding_mask"], axis=-1)


def _cut_padding(features, *rest):
    """Cuts the padding of a batch of model inputs to `padded_length` of its longest example."""
    mask = features["padding_mask"]
    # At least 1: an empty batch (a serving request) keeps a valid width.
    longest = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=-1)), 1)
    length = tf.minimum(padded_length(longest), tf.shape(mask)[-1])
    features = {name: value[..., :length] for name, value in features.items()}
    return (features, *rest) if rest else features


def sort_into_batches(groups, lengths, batch_size):
    """Sorts each group of `LENGTH_GROUP_BATCHES` batches by length and cuts it into batches.

    `lengths(*element)` gives the length of each example of a group; ragged
    elements (sentences of words) are batched with `ragged_batch`.
    """

    def sort_by_length(*element):
        order = tf.argsort(lengths(*element), stable=True)
        element = tf.nest.map_structure(lambda value: tf.gather(value, order), element)
        return element if len(element) > 1 else element[0]

    examples = groups.map(sort_by_length, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ragged = any(isinstance(spec, tf.RaggedTensorSpec) for spec in tf.nest.flatten(groups.element_spec))
    return examples.ragged_batch(batch_size) if ragged else examples.batch(batch_size)


def shuffle_batches(batches, batch_size, count):
    """Shuffles sorted batches so consecutive steps see different lengths.

    The number of steps stays `ceil(count / batch_size)`, as without
    grouping (the learning-rate schedule counts on it).
    """
    batches = batches.shuffle(LENGTH_GROUP_BATCHES, reshuffle_each_iteration=True)
    return batches.apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))


def _is_pair_spec(spec):
    """True for a `(texts_a, texts_b)` element spec of two string tensors."""
    return (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec)
    )


def _is_preprocessed(spec):
    """True for elements that are model inputs already (a dict of ids)."""
    features = spec[0] if isinstance(spec, tuple) else spec
    return isinstance(features, dict)
