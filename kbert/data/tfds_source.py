"""The TensorFlow Datasets source of kbert's readers: GLUE, SQuAD v1.1 and CoNLL-2003 online.

`load_glue`, `load_squad` and `load_conll2003` take `source="tfds"` to read
their data set through TensorFlow Datasets, which downloads and prepares it
once (under `$TFDS_DATA_DIR`, default `~/tensorflow_datasets`) and reads it
from there afterwards. Each reader converts TFDS's features and label ids to
the structures its local files give, so the two sources are interchangeable.
TensorFlow Datasets is imported only when a reader asks for it.
"""

import numpy as np

SOURCES = ("local", "tfds")


def check_source(source):
    """Returns `source` if it is one of `SOURCES`, else raises a `ValueError` naming them."""
    if source not in SOURCES:
        raise ValueError(
            f"Unknown data source {source!r}. Choose 'local' (the canonical files under "
            "kbert.data.data_dir(), offline) or 'tfds' (TensorFlow Datasets, downloaded once)."
        )
    return source


def tfds_examples(name, split):
    """Every example of one TFDS split, and the data set's `tfds.core.DatasetInfo`.

    Examples are dicts of plain Python values: text features as `str`,
    sequences as lists, numbers as `int`, in the order TFDS stores them
    (TFDS shuffles examples when it prepares a split).

    Args:
        name: the TFDS name with its config, e.g. `"glue/sst2"`.
        split: a TFDS split name, e.g. `"validation"`.

    Returns:
        `(examples, info)`.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError(
            "source='tfds' needs TensorFlow Datasets: pip install tensorflow-datasets==4.9.10"
        ) from None
    dataset, info = tfds.load(name, split=split, with_info=True, shuffle_files=False)
    return [_to_python(example) for example in tfds.as_numpy(dataset)], info


def class_names(info, feature):
    """The class names of a `ClassLabel` feature, or of a `Sequence` of them (CoNLL's tags)."""
    label = info.features[feature]
    label = getattr(label, "feature", label)  # a Sequence holds its element feature
    return list(label.names)


def describe(name, split):
    """How errors name a TFDS split: `"TFDS glue/sst2, split 'validation'"`."""
    return f"TFDS {name}, split {split!r}"


def _to_python(value):
    if isinstance(value, dict):
        return {key: _to_python(item) for key, item in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_to_python(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
