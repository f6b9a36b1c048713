"""`load_model`: a kbert `.keras` file checked, then read in Keras' safe mode."""

import importlib
import os
import tempfile
import zipfile

# The modules that register kbert's Keras classes (models, their
# preprocessors, the pretrainer), which Keras must know before it reads a
# file naming them. Those of the text side need TensorFlow.
_MODEL_MODULES = (
    "kbert.models.classifier",
    "kbert.models.distiller",
    "kbert.models.embedder",
    "kbert.models.encoder",
    "kbert.models.layerwise_distiller",
    "kbert.models.transformer_block",
    "kbert.models.multiple_choice",
    "kbert.models.optimization",
    "kbert.models.question_answerer",
    "kbert.models.tagger",
    "kbert.pretraining.pretrainer",
)
_TEXT_MODULES = (
    "kbert.preprocessing.classifier_preprocessor",
    "kbert.preprocessing.embedder_preprocessor",
    "kbert.preprocessing.multiple_choice_preprocessor",
    "kbert.preprocessing.text_packer",
    "kbert.preprocessing.question_answerer_preprocessor",
    "kbert.preprocessing.sentence_piece_tokenizer",
    "kbert.preprocessing.tagger_preprocessor",
    "kbert.preprocessing.tokenizer",
)


def register_kbert_classes():
    """Imports every module that registers a kbert class with Keras (without TensorFlow, those that need none).

    On a backend other than TensorFlow, TensorFlow (the text side) is first
    kept off the accelerators, whose memory is the backend's.
    """
    from kbert.backend.selection import keep_tensorflow_off_accelerators
    from kbert.backend.tensorflow_support import tensorflow_installed

    text_side = tensorflow_installed()
    if text_side and os.environ.get("KERAS_BACKEND") != "tensorflow":
        keep_tensorflow_off_accelerators()
    for module in _MODEL_MODULES + (_TEXT_MODULES if text_side else ()):
        importlib.import_module(module)


def load_model(path):
    """Loads a kbert model saved with `model.save("name.keras")`.

    Loading is Keras' safe mode: no code in the file runs, and no path or
    URL named inside it is read (a vocabulary travels in the file). A file
    that is missing, a folder, or not a whole `.keras` archive (truncated,
    corrupt), or whose members declare more bytes than a model holds
    (`kbert.io.safe_loading.LIMITS`), fails with one line naming it, before
    anything in it is read; so does one whose config nests too deep or
    implies more weights than its weights file holds (`vocabulary_size`,
    `num_layers` ...: `kbert.io.safe_loading.check_keras_file`), before the
    model is built, and one that names a class neither kbert's nor Keras'.

    A file of an earlier kbert, whose Transformer blocks' weights lie under
    other names (kbert 0.4's blocks, `LeanTransformerEncoder`s on keras-hub's
    `TransformerEncoder`), is read through an upgraded copy in a temporary
    folder (`kbert.models.block_layout_upgrade`).

    Example:
    >>> import tempfile, kbert
    >>> encoder = kbert.Encoder(vocabulary_size=30, num_layers=1, num_heads=1, hidden_dim=8,
    ...                         intermediate_dim=16, max_sequence_length=8)
    >>> path = f"{tempfile.mkdtemp()}/encoder.keras"
    >>> encoder.save(path)
    >>> load_model(path).get_config() == encoder.get_config()
    True
    """
    import keras

    from kbert.io.safe_loading import check_keras_file, keras_loading_refusal

    # Sizes bounded before Keras reads a byte; a local path with "://" in it is
    # made one that Keras reads as a file.
    readable = check_keras_file(path)
    register_kbert_classes()
    try:
        with tempfile.TemporaryDirectory(prefix="kbert-") as folder:
            return keras.saving.load_model(_with_current_block_layout(readable, folder))
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"{path} is not a valid .keras file: {error}.") from None
    except TypeError as error:
        # Keras wraps an error of a nested layer's `from_config` in a TypeError
        # per level, each holding the whole config: the class it does not know,
        # or the first ValueError, says it.
        refusal = keras_loading_refusal(path, error)
        if refusal is not None:
            raise refusal from None
        refusal = _first_value_error(error)
        if refusal is None:
            raise
        raise ValueError(f"{path}: {refusal}") from None


def _with_current_block_layout(path, folder):
    from kbert.models.block_layout_upgrade import has_old_block_layout, upgrade_block_layout

    if "://" in str(path) or not has_old_block_layout(path):
        return path
    return upgrade_block_layout(path, folder)


def _first_value_error(error):
    while error is not None and not isinstance(error, ValueError):
        error = error.__cause__ or error.__context__
    return error
