"""Readers of a user's own labelled files, and of the NLP data sets used by kbert's tests, tutorials and benchmarks.

`read_labelled_file` reads CSV, TSV and JSON Lines files of texts (or
pairs) and labels into what the task models' `fit` takes.

Files are looked up under `data_dir()` (`$KBERT_DATA`, or `shared/data` next
to the repository), so everything works offline. GLUE, SQuAD v1.1 and
CoNLL-2003 can also come from TensorFlow Datasets (`source="tfds"`), in the
same structures. The readers are plain Python (importing them does not
import TensorFlow); `task_dataset`, the `tf.data` input pipeline of the task
models, loads TensorFlow when first used.
"""

from kbert.data.conll import CONLL2003_LABELS, CONLL2003_SPLITS, load_conll2003, read_conll
from kbert.data.glue import GLUE_SPLITS, GLUE_TASKS, load_glue
from kbert.data.labelled_file import LabelledExamples, read_labelled_file
from kbert.data.paths import DataFormatError, data_dir, find_data_file
from kbert.data.sick import SICK_LABEL_NAMES, SICK_SPLITS, load_sick
from kbert.data.sms_spam import SMS_SPAM_LABEL_NAMES, load_sms_spam, split_sms_spam
from kbert.data.squad import (
    SQUAD_EVAL_ARTICLES,
    SQUAD_TRAIN_ARTICLES,
    load_squad,
    squad_article_split,
)
from kbert.data.tfds_source import SOURCES

__all__ = [
    "CONLL2003_LABELS",
    "CONLL2003_SPLITS",
    "GLUE_SPLITS",
    "GLUE_TASKS",
    "SICK_LABEL_NAMES",
    "SICK_SPLITS",
    "SMS_SPAM_LABEL_NAMES",
    "SOURCES",
    "SQUAD_EVAL_ARTICLES",
    "SQUAD_TRAIN_ARTICLES",
    "DataFormatError",
    "LabelledExamples",
    "data_dir",
    "find_data_file",
    "load_conll2003",
    "load_glue",
    "load_sick",
    "load_sms_spam",
    "load_squad",
    "split_sms_spam",
    "squad_article_split",
    "read_conll",
    "read_labelled_file",
    "task_dataset",
]


def __getattr__(name):
    # The input pipeline is TensorFlow: imported when asked for, not with the readers.
    if name == "task_dataset":
        from kbert.preprocessing.input_pipeline import task_dataset

        return task_dataset
    raise AttributeError(f"module 'kbert.data' has no attribute {name!r}")
