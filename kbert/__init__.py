"""kbert: BERT for Keras, from raw text to served model.

The pipeline, in the order data takes it:

- `Tokenizer` (TF-Text WordPiece) and `learn_vocabulary`;
- `Preprocessor`: texts and text pairs to `token_ids`, `segment_ids`, `padding_mask`;
- `Encoder`: embeddings, Transformer blocks, pooler (`PRESETS` tiny ... large);
- task models that `fit` on raw strings: `classifier`, `question_answerer`,
  `tagger`, `multiple_choice`, and `embedder` for sentence vectors; each
  with its task preprocessor (`ClassifierPreprocessor`, ...), fed by
  `data.task_dataset`;
- `load_pretrained` / `save_pretrained`: published BERT checkpoints
  (Hugging Face, Google, keras-hub) in and out;
- pretraining: `pretraining_dataset` (masked LM + next-sentence pairs from
  raw documents), `Pretrainer`, `callbacks.standard` (TensorBoard,
  checkpoints, resume), `fill_mask`;
- `export`: a task model as a versioned SavedModel that TF Serving serves on raw text;
- `data`: readers for the canonical data sets; `metrics`: how each task is scored.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "tensorflow" not in sys.modules:
    # TensorFlow turns its oneDNN kernels on only on CPUs with AVX-512 VNNI or
    # AMX; on the others (AVX2 Xeons, EPYCs) they run BERT up to 1.75x faster
    # than the default Eigen kernels (benchmarks/speed.py). The switch is read
    # once, when TensorFlow loads, so it is set only if kbert comes first;
    # `TF_ENABLE_ONEDNN_OPTS=0` keeps it off.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import keras  # noqa: E402

from kbert import callbacks, checkpoints, data, metrics  # noqa: E402
from kbert.serving import export  # noqa: E402
from kbert.checkpoints import load_pretrained, save_pretrained  # noqa: E402
from kbert.data.pretraining import pretraining_dataset, prepare_pretraining_data  # noqa: E402
from kbert.models.classifier import Classifier  # noqa: E402
from kbert.models.embedder import Embedder  # noqa: E402
from kbert.models.encoder import Encoder  # noqa: E402
from kbert.models.fill_mask import FillMask, fill_mask  # noqa: E402
from kbert.models.multiple_choice import MultipleChoice  # noqa: E402
from kbert.models.pretrainer import Pretrainer  # noqa: E402
from kbert.models.question_answerer import QuestionAnswerer  # noqa: E402
from kbert.models.tagger import Tagger  # noqa: E402
from kbert.optimization import WarmupLinearDecay  # noqa: E402
from kbert.preprocessing.classifier_preprocessor import ClassifierPreprocessor  # noqa: E402
from kbert.preprocessing.embedder_preprocessor import EmbedderPreprocessor  # noqa: E402
from kbert.preprocessing.multiple_choice_preprocessor import MultipleChoicePreprocessor  # noqa: E402
from kbert.preprocessing.preprocessor import Preprocessor  # noqa: E402
from kbert.preprocessing.question_answerer_preprocessor import QuestionAnswererPreprocessor  # noqa: E402
from kbert.preprocessing.tagger_preprocessor import TaggerPreprocessor  # noqa: E402
from kbert.preprocessing.tokenizer import SPECIAL_TOKENS, Tokenizer  # noqa: E402
from kbert.preprocessing.vocabulary import learn_vocabulary  # noqa: E402
from kbert.presets import PRESETS  # noqa: E402
from kbert.builders import (  # noqa: E402
    classifier,
    embedder,
    multiple_choice,
    question_answerer,
    tagger,
)

__version__ = "0.2.0"


def load_model(path):
    """Loads a kbert model saved with `model.save("name.keras")`."""
    return keras.saving.load_model(path)


__all__ = [
    "Classifier",
    "ClassifierPreprocessor",
    "Embedder",
    "EmbedderPreprocessor",
    "Encoder",
    "FillMask",
    "MultipleChoice",
    "MultipleChoicePreprocessor",
    "PRESETS",
    "Preprocessor",
    "Pretrainer",
    "QuestionAnswerer",
    "QuestionAnswererPreprocessor",
    "SPECIAL_TOKENS",
    "Tagger",
    "TaggerPreprocessor",
    "Tokenizer",
    "WarmupLinearDecay",
    "callbacks",
    "checkpoints",
    "classifier",
    "data",
    "embedder",
    "export",
    "fill_mask",
    "learn_vocabulary",
    "load_pretrained",
    "load_model",
    "metrics",
    "multiple_choice",
    "prepare_pretraining_data",
    "pretraining_dataset",
    "question_answerer",
    "save_pretrained",
    "tagger",
]
