"""kbert: BERT for Keras, from raw text to served model.

The pipeline, in the order data takes it:

- `Tokenizer` (TF-Text WordPiece) and `learn_vocabulary`; `SentencePieceTokenizer` (ALBERT's);
- `TextPacker`: texts and text pairs to `token_ids`, `segment_ids`, `padding_mask`;
- `Encoder`: embeddings, Transformer blocks, pooler (`PRESETS` tiny ... large);
- task models that `fit` on raw strings: `classifier`, `question_answerer`,
  `tagger`, `multiple_choice`, and `embedder` for sentence vectors; each
  with its task preprocessor (`ClassifierPreprocessor`, ...), fed by
  `data.task_dataset`;
- `load_model`: a kbert `.keras` file, read safely; `load_adapter`: a LoRA
  adapter file (`model.save_adapter`) on its base encoder;
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

from kbert.backend.selection import choose_backend


def _is_the_kbert_command():
    """Whether this process is the `kbert` command: the one place kbert reads the program's name.

    The backend does not depend on it (`choose_backend`: KERAS_BACKEND,
    keras.json, else the first installed). Two things do: TensorFlow's C++
    log is silent in the command, and the command imports the public names
    on first use, so `kbert --help` loads neither TensorFlow nor Keras. Why: the
    console script's entry point is `kbert.cli.main:main`, and Python runs
    this file before any code of `kbert.cli`, so argv is all the command
    can say by then. The console script runs with argv[0] ending in `kbert`;
    `python -m kbert.cli` imports this package while argv[0] is still "-m".
    """
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
    "load_model": "kbert.saving",
    "load_adapter": "kbert.checkpoints",
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
    "TextPacker": "kbert.preprocessing.text_packer",
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
        from kbert.saving import register_kbert_classes

        register_kbert_classes()  # first: it keeps TensorFlow off the accelerators of another backend
        text_side = tensorflow_installed()
        for module in (*(f"kbert.{name}" for name in _SUBPACKAGES), *_NAMES.values()):
            if text_side or module not in _TENSORFLOW_MODULES:
                importlib.import_module(module)


def _needs_tensorflow(name, module):
    from kbert.backend.tensorflow_support import TensorFlowMissingError, missing_message, tensorflow_installed

    if module in _TENSORFLOW_MODULES and not tensorflow_installed():
        raise TensorFlowMissingError(missing_message(f"kbert.{name}"))


# Old public names, kept for one release (docs/changes.rst): each use warns.
_RENAMED = {"Preprocessor": "TextPacker"}


def __getattr__(name):
    if name in _RENAMED:
        from kbert.io.deprecation import warn_renamed

        warn_renamed(f"kbert.{name}", f"kbert.{_RENAMED[name]}")
        return __getattr__(_RENAMED[name])
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


# Every public name, each declared once above: in `_NAMES` or `_SUBPACKAGES`.
__all__ = sorted([*_NAMES, *_SUBPACKAGES])

if not _is_the_kbert_command():
    _load()
    if _TENSORFLOW_LOADED_FIRST and os.environ["KERAS_BACKEND"] == "tensorflow":
        from kbert.backend.onednn import warn_if_onednn_off

        warn_if_onednn_off()
