"""Calls an exported SavedModel on texts, as a client of the model server would."""

import numpy as np
import tensorflow as tf

from kbert.serving.exporter import latest_version
from kbert.serving.op_safety import check_safe_to_load
from kbert.serving.saved_model_variables import check_variables, variables_error
from kbert.serving.serving_module import SERVING_DEFAULT

# The order texts are given in, for signatures with several inputs.
INPUT_ORDER = ("text", "text_pair", "question", "context", "choices")


class SavedModelPredictor:
    """Runs an exported model's `serving_default` on texts; returns one dict per example.

    Loads the SavedModel itself (the newest version of a model folder), not
    the Keras model, so it answers as TF Serving would. Outputs padded to
    the batch (a tagger's words, question answering's candidates) are cut
    to each example's own `word_counts` / `candidate_counts`, and strings
    are decoded.

    A SavedModel is a program: loading and calling it runs its graph with
    the user's rights. Before loading, its ops are checked
    (`kbert.serving.check_safe_to_load`): a model whose graph can read or
    write files, reach the network, run Python or end the process is
    refused, unless `trust=True`. Either way, variables that are truncated,
    corrupt or not the graph's own (another model's) are refused in one
    line naming the file (`kbert.serving.saved_model_variables`).

    Args:
        path: a model folder of numbered versions (`saved_models/spam`)
            or one version folder.
        trust: load without checking the ops, for a model whose source
            you trust.

    Example:
    >>> vocab = kbert.learn_vocabulary(["WINNER!! claim your prize", "see you at lunch"] * 5,
    ...                                vocabulary_size=60, verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16,
    ...                        class_names=["ham", "spam"])
    >>> _ = kbert.export(clf, os.path.join(folder, "spam"), text_pairs=False)
    >>> predictor = kbert.serving.SavedModelPredictor(os.path.join(folder, "spam"))
    >>> predictor.inputs
    ['text']
    >>> [prediction] = predictor.predict_texts(["WINNER!! claim your prize"])
    >>> sorted(prediction), prediction["labels"] in ("ham", "spam")
    (['label_ids', 'labels', 'probabilities'], True)
    """

    def __init__(self, path, trust=False, _signature=None):
        if _signature is None:
            self.path = latest_version(path)
            if not trust:
                check_safe_to_load(self.path)
            check_variables(self.path)  # truncated, or another model's: one line naming the file
            try:
                self._loaded = tf.saved_model.load(self.path)
            except Exception as error:
                refusal = variables_error(self.path, error)
                if refusal is None:
                    raise
                raise refusal from None
            if SERVING_DEFAULT not in self._loaded.signatures:
                raise ValueError(f"{self.path} has no '{SERVING_DEFAULT}' signature.")
            _signature = self._loaded.signatures[SERVING_DEFAULT]
        else:
            self.path = path
        self._signature = _signature
        specs = self._signature.structured_input_signature[1]
        unknown = sorted(set(specs) - set(INPUT_ORDER))
        if unknown:
            raise ValueError(f"{self.path}: its serving_default takes inputs kbert does not know: {unknown}.")
        self.inputs = [name for name in INPUT_ORDER if name in specs]
        # Texts per example for each input: 1, or the number of choices.
        self._widths = {name: (specs[name].shape[1] if specs[name].shape.rank == 2 else 1) for name in self.inputs}

    @classmethod
    def from_keras_model(cls, model, name="the model"):
        """A predictor of a task model in memory, by the same `serving_default` its export would have."""
        from kbert.serving.serving_module import ServingModule

        module = ServingModule(model)
        return cls(name, _signature=_KeywordSignature(module.signatures([SERVING_DEFAULT])[SERVING_DEFAULT],
                                                      [input_name for input_name, _ in module.text_inputs]))

    @property
    def texts_per_example(self):
        """How many texts `predict_texts` groups into one example (2 for a pair classifier)."""
        return sum(self._widths.values())

    def predict_texts(self, texts):
        """Groups a flat list of texts into examples, in `inputs` order, and predicts.

        Texts are `str` or `bytes`; bytes go to the model as they are, so
        text in any encoding, or not valid UTF-8, gets the model's own
        answer (its tokenizer replaces invalid UTF-8).

        A single-text model takes one text per example; a pair classifier
        `text, text_pair`; question answering `question, context`; multiple
        choice `context` then each choice.
        """
        return self.predict(self.columns_of(texts))

    def columns_of(self, texts):
        """A flat list of texts as `predict`'s `{input name: values}`, grouped per example in `inputs` order."""
        per_example = self.texts_per_example
        if not texts or len(texts) % per_example:
            raise ValueError(
                f"This model takes {per_example} texts per example ({self._describe()}); got {len(texts)}."
            )
        columns = {name: [] for name in self.inputs}
        for start in range(0, len(texts), per_example):
            position = start
            for name in self.inputs:
                width = self._widths[name]
                value = texts[position : position + width]
                columns[name].append(value if self._widths[name] > 1 else value[0])
                position += width
        return columns

    def predict(self, columns):
        """`columns`: `{input name: list of values}`; returns one dict of outputs per example."""
        missing = [name for name in self.inputs if name not in columns]
        if missing:
            raise ValueError(f"Missing inputs {missing}; this model takes {self._describe()}.")
        tensors = {name: tf.constant(_as_bytes(columns[name]), tf.string) for name in self.inputs}
        outputs = {name: value.numpy() for name, value in self._signature(**tensors).items()}
        return [_example(outputs, i) for i in range(len(columns[self.inputs[0]]))]

    def _describe(self):
        return ", ".join(f"{name} x{width}" if width > 1 else name for name, width in self._widths.items())


class _KeywordSignature:
    """A traced `serving_default` (positional inputs) called by input name, as a loaded signature is."""

    def __init__(self, function, names):
        self._function, self._names = function, names
        self.structured_input_signature = ((), dict(zip(names, function.structured_input_signature[0])))

    def __call__(self, **tensors):
        return self._function(*(tensors[name] for name in self._names))


def _as_bytes(value):
    """Texts as bytes: `bytes` as they are, `str` as UTF-8.

    A `str` may hold lone surrogates where it was decoded with
    `surrogateescape` (as Python decodes command-line arguments and file
    names): they become the bytes they stand for, so any bytes can be sent.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape")
    return [_as_bytes(item) for item in value]


def _example(outputs, index):
    row = {name: value[index] for name, value in outputs.items()}
    for count, prefix in (("word_counts", ("words", "tags", "tag_ids", "scores", "word_starts", "word_ends")),
                          ("candidate_counts", ("candidate_",))):
        if count in row:
            for name in row:
                if name != count and name.startswith(prefix):
                    row[name] = row[name][: int(row[count])]
    plain = {name: _plain(value) for name, value in row.items()}
    if isinstance(plain.get("labels"), list) and "label_mask" in plain:  # multi-label: the chosen names, unpadded
        plain["labels"] = [label for label in plain["labels"] if label]
    return plain


def _plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    value = np.asarray(value)
    if value.dtype == object:
        decoded = [v.decode("utf-8", errors="replace") for v in value.reshape(-1)]
        return decoded[0] if value.ndim == 0 else np.asarray(decoded, dtype=object).reshape(value.shape).tolist()
    return value.item() if value.ndim == 0 else value.tolist()
