"""kbert: BERT for Keras, from raw text to served model.

The pipeline, in the order data takes it:

- `Tokenizer` (TF-Text WordPiece) and `learn_vocabulary`; `SentencePieceTokenizer` (ALBERT's);
- `Preprocessor`: texts and text pairs to `token_ids`, `segment_ids`, `padding_mask`;
- `Encoder`: embeddings, Transformer blocks, pooler (`PRESETS` tiny ... large);
- task models that `fit` on raw strings: `classifier`, `question_answerer`,
  `tagger`, `multiple_choice`, and `embedder` for sentence vectors; each
  with its task preprocessor (`ClassifierPreprocessor`, ...), fed by
  `data.task_dataset`;
- `load_pretrained` / `save_pretrained`: published BERT checkpoints
  (Hugging Face, Google, keras-hub) in and out;
- pretraining: `pretraining_dataset` (masked LM + next-sentence pairs from
  raw documents; options as `PretrainingSettings`, batches as
  `PretrainingData`), `Pretrainer`, `callbacks.standard` (TensorBoard,
  checkpoints, resume), `fill_mask`;
- `export`: a task model as a versioned SavedModel that TF Serving serves on raw text;
- `data`: readers for the canonical data sets; `metrics`: how each task is scored.
"""

import importlib
import importlib.util
import os
import sys

from kbert.backend.selection import choose_backend, keep_tensorflow_off_accelerators


def _is_the_kbert_command():
    # The console script runs with argv[0] ending in `kbert`; `python -m
    # kbert.cli` imports this package while argv[0] is still "-m".
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) in ("kbert", "kbert.exe") or first == "-m"


# Before anything loads Keras or TensorFlow, which read these once.
_TENSORFLOW_LOADED_FIRST = choose_backend(quiet=_is_the_kbert_command())

__version__ = "0.5.0"  # the release docs/changes.rst describes last; pyproject reads it here

# Public names and the modules that define them. In the `kbert` command they
# are imported on first use (PEP 562), so `kbert --help` does not load
# TensorFlow and Keras (seconds, and their log lines); any other program
# imports them with the package (end of this file), so that every kbert class
# is registered with Keras and `keras.saving.load_model` reads kbert models.
_SUBPACKAGES = ("callbacks", "checkpoints", "compression", "data", "metrics")
_NAMES = {
    "export": "kbert.serving",
    "load_pretrained": "kbert.checkpoints",
    "save_pretrained": "kbert.checkpoints",
    "pretraining_dataset": "kbert.pretraining.dataset",
    "prepare_pretraining_data": "kbert.pretraining.dataset",
    "PretrainingData": "kbert.pretraining.pretraining_data",
    "PretrainingSettings": "kbert.pretraining.pretraining_settings",
    "Classifier": "kbert.models.classifier",
    "Distiller": "kbert.models.distiller",
    "Embedder": "kbert.models.embedder",
    "Encoder": "kbert.models.encoder",
    "FillMask": "kbert.pretraining.fill_mask",
    "LayerwiseDistiller": "kbert.models.layerwise_distiller",
    "MagnitudePruning": "kbert.compression.magnitude_pruning",
    "fill_mask": "kbert.pretraining.fill_mask",
    "MultipleChoice": "kbert.models.multiple_choice",
    "Pretrainer": "kbert.pretraining.pretrainer",
    "QuestionAnswerer": "kbert.models.question_answerer",
    "Tagger": "kbert.models.tagger",
    "WarmupLinearDecay": "kbert.models.optimization",
    "ClassifierPreprocessor": "kbert.preprocessing.classifier_preprocessor",
    "EmbedderPreprocessor": "kbert.preprocessing.embedder_preprocessor",
    "MultipleChoicePreprocessor": "kbert.preprocessing.multiple_choice_preprocessor",
    "Preprocessor": "kbert.preprocessing.preprocessor",
    "QuestionAnswererPreprocessor": "kbert.preprocessing.question_answerer_preprocessor",
    "TaggerPreprocessor": "kbert.preprocessing.tagger_preprocessor",
    "SPECIAL_TOKENS": "kbert.preprocessing.tokenizer",
    "Tokenizer": "kbert.preprocessing.tokenizer",
    "SentencePieceTokenizer": "kbert.preprocessing.sentence_piece_tokenizer",
    "learn_vocabulary": "kbert.preprocessing.vocabulary",
    "PRESETS": "kbert.models.presets",
    "prune_heads": "kbert.compression.head_pruning",
    "classifier": "kbert.builders",
    "embedder": "kbert.builders",
    "multiple_choice": "kbert.builders",
    "question_answerer": "kbert.builders",
    "tagger": "kbert.builders",
}


# The modules of kbert's text side, which TensorFlow (and TF-Text) make:
# without them, their names raise `TensorFlowMissingError`, and the rest of
# kbert works (models, training on token ids, `.keras` files).
_TENSORFLOW_MODULES = {
    "kbert.serving",
    "kbert.pretraining.dataset",
    "kbert.pretraining.pretraining_data",
    "kbert.pretraining.fill_mask",
    "kbert.builders",
    *(module for module in _NAMES.values() if module.startswith("kbert.preprocessing.")),
}

_loaded = False


def _load():
    """Imports every module behind the public names, once (what `import kbert` did eagerly).

    All at once rather than name by name, so that every kbert class is
    registered with Keras (for `keras.saving.load_model`) as soon as any of
    them is used. Without TensorFlow, the modules of the text side are left out.
    """
    global _loaded
    if not _loaded:
        _loaded = True
        from kbert.backend.tensorflow_support import tensorflow_installed

        text_side = tensorflow_installed()
        if text_side and os.environ["KERAS_BACKEND"] != "tensorflow":
            keep_tensorflow_off_accelerators()
        for module in (*(f"kbert.{name}" for name in _SUBPACKAGES), *_NAMES.values()):
            if text_side or module not in _TENSORFLOW_MODULES:
                importlib.import_module(module)


def _needs_tensorflow(name, module):
    from kbert.backend.tensorflow_support import TensorFlowMissingError, missing_message, tensorflow_installed

    if module in _TENSORFLOW_MODULES and not tensorflow_installed():
        raise TensorFlowMissingError(missing_message(f"kbert.{name}"))


def __getattr__(name):
    if name in _NAMES:
        _needs_tensorflow(name, _NAMES[name])
        value = getattr(importlib.import_module(_NAMES[name]), name)
        _load()
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"kbert.{name}")
        _load()
    elif not name.startswith("_") and importlib.util.find_spec(f"kbert.{name}") is not None:
        # Any other module (kbert.serving, kbert.cli, ...): only itself, so
        # `from kbert import cli` stays light.
        _needs_tensorflow(name, f"kbert.{name}")
        value = importlib.import_module(f"kbert.{name}")
    else:
        raise AttributeError(f"module 'kbert' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


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

    A file written by kbert 0.4 or earlier, whose Transformer blocks were
    keras-hub's, is read through an upgraded copy in a temporary folder
    (`kbert.models.block_layout_upgrade`).
    """
    import tempfile
    import zipfile

    import keras

    from kbert.io.safe_loading import check_keras_file, keras_loading_refusal

    # Sizes bounded before Keras reads a byte; a local path with "://" in it is
    # made one that Keras reads as a file.
    readable = check_keras_file(path)
    _load()  # kbert's classes register with Keras when their modules load
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
    from kbert.models.block_layout_upgrade import has_keras_hub_block_layout, upgrade_block_layout

    if "://" in str(path) or not has_keras_hub_block_layout(path):
        return path
    return upgrade_block_layout(path, folder)


def _first_value_error(error):
    while error is not None and not isinstance(error, ValueError):
        error = error.__cause__ or error.__context__
    return error


# Every public name, each declared once above: in `_NAMES`, `_SUBPACKAGES`, or as `load_model`.
__all__ = sorted([*_NAMES, *_SUBPACKAGES, "load_model"])

if not _is_the_kbert_command():
    _load()
    if _TENSORFLOW_LOADED_FIRST and os.environ["KERAS_BACKEND"] == "tensorflow":
        from kbert.backend.onednn import warn_if_onednn_off

        warn_if_onednn_off()
