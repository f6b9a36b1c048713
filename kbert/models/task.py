"""Base class of kbert's task models: Keras models that take raw text."""

import keras
import numpy as np
import tensorflow as tf

from kbert.optimization import start_schedule_window
from kbert.preprocessing.preprocessor import split_segments

DEFAULT_BATCH_SIZE = 32


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


class Task(keras.Model):
    """A functional Keras model with its `Preprocessor` attached.

    `fit`, `evaluate` and `predict` take raw strings: lists or NumPy arrays of
    texts, `(texts_a, texts_b)` tuples of pairs, or a `tf.data.Dataset` of
    texts (or `(texts, labels)`), batched or not. The text is tokenized in a
    `tf.data` pipeline (batched, in parallel, prefetched) so the model itself
    only sees token ids. Subclasses build the functional graph and call
    `super().__init__(inputs=..., outputs=..., preprocessor=...)`.
    """

    def __init__(self, *args, preprocessor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor

    # Targets: subclasses check labels before any training step runs.
    def check_targets(self, y):
        return y

    def _dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False):
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("With a tf.data.Dataset, put labels in the dataset, not in `y`.")
            dataset = x
            if _is_preprocessed(dataset.element_spec):
                return dataset  # Keras' own evaluate inside fit, for one.
            first = dataset.element_spec
            first = first[0] if isinstance(first, tuple) and not _is_pair_spec(first) else first
            first = split_segments(first)[0][0]
            if first.shape.rank == 0:
                dataset = dataset.batch(batch_size)
        else:
            segments, is_pair = split_segments(x)
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
            dataset = dataset.batch(batch_size)

        def preprocess(features, *rest):
            features = self.preprocessor(features)
            return (features, *rest) if rest else features

        if _is_pair_spec(dataset.element_spec):
            # tf.data passes a tuple element as separate arguments.
            mapped = dataset.map(lambda a, b: preprocess((a, b)), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            mapped = dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
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
        }


def encoder_and_preprocessor(encoder, preprocessor):
    """A task's encoder and preprocessor, deserialized from a config when they come as dicts, and checked."""
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
    return encoder, preprocessor


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
