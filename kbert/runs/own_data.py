"""A user's own labelled files as a run's data: read, split, labelled, and recorded in the run folder."""

import dataclasses
import hashlib

import numpy as np

from kbert.data.labelled_file import class_names_of, label_ids, label_kind, read_labelled_file

# The sequence length of a run on files unless --sequence-length says otherwise.
FILE_SEQUENCE_LENGTH = 128


@dataclasses.dataclass(frozen=True)
class FileData:
    """What a run on files trains, validates and scores on, with its classes.

    `validation` is the validation file, or the seeded, stratified part of
    the training file that `validation_split` set aside. The run is scored
    on `test` where there is one, else on `validation`.
    """

    train: object  # kbert.data.LabelledExamples
    validation: object
    test: object  # None without a test file
    class_names: list
    validation_split: float  # None when a validation file was given
    seed: int

    @property
    def eval_split(self):
        return "test" if self.test is not None else "validation"

    @property
    def splits(self):
        return tuple(split for split in ("train", "validation", "test") if self.examples(split) is not None)

    def examples(self, split):
        return {"train": self.train, "validation": self.validation, "test": self.test}[split]

    def xy(self, split):
        """`(x, class ids)` of a split, as the classifier's `fit` takes them."""
        examples = self.examples(split)
        return examples.x, label_ids(examples, self.class_names)

    def record(self):
        """What metrics.json keeps of the data: each file's path, sha256, rows and columns, the classes."""
        record = {"classes": list(self.class_names), "seed": self.seed, "validation_split": self.validation_split,
                  "files": {}}
        for split in ("train", "validation", "test"):
            examples = self.examples(split)
            if examples is None:
                continue
            record["files"][split] = {"path": examples.path, "sha256": sha256_of(examples.path),
                                      "rows": len(examples), "columns": dict(examples.columns),
                                      "format": examples.file_format}
            if split == "validation" and self.validation_split is not None:
                record["files"][split]["part_of"] = "train"
        return record


def read_file_data(train, validation=None, test=None, columns=None, labels=None, validation_split=0.1, seed=0):
    """Reads the files of a run on the user's data (`kbert train --train ...`).

    Args:
        train, validation, test: the files (CSV, TSV, JSONL:
            `kbert.data.read_labelled_file`).
        columns: keyword arguments of `read_labelled_file` (`text_column`,
            ...), the same for every file.
        labels: the class names in id order; None takes them from the
            training labels (`kbert.data.labelled_file.class_names_of`).
        validation_split: without a validation file, the fraction of each
            class of the training file set aside to validate on (seeded).

    Raises:
        DataFormatError: a label of the validation or test file that the
            training file does not have, named with its file and line.
    """
    columns = columns or {}
    train_examples = read_labelled_file(train, **columns)
    kind = label_kind(train_examples.labels)
    if kind != "classification":
        raise ValueError(f"{train}: its labels are {'lists' if kind == 'multi-label' else 'fractional numbers'} "
                         f"({kind}); kbert train fits classes from files: labels as strings or integers.")
    class_names = list(labels) if labels else class_names_of(train_examples.labels)
    if len(set(class_names)) != len(class_names):
        raise ValueError(f"The class names {class_names} repeat a name.")
    if len(class_names) < 2:
        raise ValueError(f"{train}: every example has the label {class_names[0]!r}; a classifier needs two "
                         "classes or more.")
    label_ids(train_examples, class_names)  # a label outside --labels is named with its line
    if validation is not None:
        validation_examples, fraction = read_labelled_file(validation, **columns), None
        train_part = train_examples
    else:
        train_ids, validation_ids = stratified_split(label_ids(train_examples, class_names), validation_split, seed)
        train_part, validation_examples = train_examples.subset(train_ids), train_examples.subset(validation_ids)
        fraction = validation_split
    test_examples = read_labelled_file(test, **columns) if test is not None else None
    for examples in (validation_examples, test_examples):
        if examples is not None:
            if (examples.text_pairs is None) != (train_part.text_pairs is None):
                raise ValueError(f"{examples.path} has {'no ' if examples.text_pairs is None else ''}text pairs "
                                 f"where {train} has {'none' if train_part.text_pairs is None else 'them'}.")
            label_ids(examples, class_names)
    return FileData(train_part, validation_examples, test_examples, class_names, fraction, seed)


def stratified_split(class_ids, fraction, seed=0):
    """`(train indices, validation indices)`: about `fraction` of each class, seeded, in file order.

    A class of two examples or more gives at least one to each side.

    >>> stratified_split([0, 0, 0, 0, 1, 1, 1, 1, 1, 1], 0.5)
    ([1, 3, 4, 5, 8], [0, 2, 6, 7, 9])
    """
    if not 0 < fraction < 1:
        raise ValueError(f"The validation split must be between 0 and 1, got {fraction}.")
    class_ids = np.asarray(class_ids)
    rng = np.random.default_rng(seed)
    validation = []
    for class_id in np.unique(class_ids):
        members = np.flatnonzero(class_ids == class_id)
        count = int(round(len(members) * fraction))
        if len(members) >= 2:
            count = min(max(count, 1), len(members) - 1)
        validation.extend(rng.permutation(members)[:count].tolist())
    validation = sorted(validation)
    chosen = set(validation)
    return [i for i in range(len(class_ids)) if i not in chosen], validation


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_evaluation_file(path, model, columns=None):
    """A labelled file to score `model` on (`kbert evaluate --data`), its labels checked against the model's classes."""
    class_names = getattr(model, "class_names", None)
    if not class_names:
        raise ValueError(f"{path}: the model has no class names, so the file's labels cannot be matched to its "
                         "classes; score it on a named data set with --task.")
    examples = read_labelled_file(path, **(columns or {}))
    label_ids(examples, class_names)
    return FileData(None, None, examples, list(class_names), None, 0)
