"""Readers for the NLP data sets used by kbert's tests, tutorials and benchmarks.

Files are looked up under `data_dir()` (`$KBERT_DATA`, or `shared/data` next
to the repository), so everything works offline. Plain Python: importing this
package does not import TensorFlow.
"""

from kbert.data.glue import GLUE_SPLITS, GLUE_TASKS, load_glue
from kbert.data.paths import DataFormatError, data_dir, find_data_file
from kbert.data.sms_spam import SMS_SPAM_LABEL_NAMES, load_sms_spam

__all__ = [
    "GLUE_SPLITS",
    "GLUE_TASKS",
    "SMS_SPAM_LABEL_NAMES",
    "DataFormatError",
    "data_dir",
    "find_data_file",
    "load_glue",
    "load_sms_spam",
]
