"""A user's own labelled files as a run's data: read, split, labelled, and recorded in the run folder."""

import dataclasses
import hashlib
import os

import numpy as np

from kbert.data.labelled_file import (
    class_names_of,
    label_ids,
    label_kind,
    label_lists,
    label_scores,
    read_labelled_file,
)
from kbert.io.setting_error import SettingError

# The sequence length of a run on files unless `sequence_length` says otherwise.
FILE_SEQUENCE_LENGTH = 128


# What `kbert train --train FILE` fits, by `--task-type` or by the file.
TASK_TYPES = ("classification", "multi-label", "regression", "tagging", "question-answering", "multiple-choice")
# The problem type of the classifier head for each task type that has one.
PROBLEM_TYPES = {"classification": "single_label", "multi-label": "multi_label", "regression": "regression"}
# CoNLL column files (a word a line, its tag in a column): tagging.
TAGGING_EXTENSIONS = (".conll", ".conllu", ".iob", ".iob1", ".iob2", ".bio", ".bioes", ".ner")


@dataclasses.dataclass(frozen=True)
class TaggedSentences:
    """The sentences of a CoNLL file and their tags (IOB2), as a run on files holds them."""

    path: str
    sentences: list
    tags: list
    columns: dict
    file_format: str = "conll"

    @property
    def x(self):
        return self.sentences

    def __len__(self):
        return len(self.sentences)

    def subset(self, indices):
        return dataclasses.replace(self, sentences=[self.sentences[i] for i in indices],
                                   tags=[self.tags[i] for i in indices])


@dataclasses.dataclass(frozen=True)
class Questions:
    """The questions of a SQuAD-format JSON file (`kbert.data.load_squad`'s records)."""

    path: str
    records: list
    columns: dict = dataclasses.field(default_factory=dict)
    file_format: str = "squad"

    @property
    def x(self):
        return self.records

    def __len__(self):
        return len(self.records)

    def subset(self, indices):
        return dataclasses.replace(self, records=[self.records[i] for i in indices])


@dataclasses.dataclass(frozen=True)
class FileData:
    """What a run on files trains, validates and scores on: its task type, and its classes or tags.

    `validation` is the validation file, or the seeded part of the training
    file that `validation_split` set aside (stratified by class for a
    classifier, whole articles for questions). The run is scored on `test`
    where there is one, else on `validation`.
    """

    train: object  # LabelledExamples, TaggedSentences or Questions
    validation: object
    test: object  # None without a test file
    class_names: list  # the classes, or the tags; None for questions
    validation_split: float  # None when a validation file was given
    seed: int
    task_type: str = "classification"

    @property
    def eval_split(self):
        return "test" if self.test is not None else "validation"

    @property
    def splits(self):
        return tuple(split for split in ("train", "validation", "test") if self.examples(split) is not None)

    def examples(self, split):
        return {"train": self.train, "validation": self.validation, "test": self.test}[split]

    def xy(self, split):
        """`(x, y)` of a split as the task model's `fit` takes them: texts and class ids, words and tags, or questions."""
        examples = self.examples(split)
        if self.task_type == "tagging":
            return examples.sentences, examples.tags
        if self.task_type == "question-answering":
            return examples.records, None
        if self.task_type == "multi-label":
            return examples.x, label_lists(examples, self.class_names)
        if self.task_type == "multiple-choice":
            return examples.x, list(examples.labels)
        if self.task_type == "regression":
            return examples.x, label_scores(examples)
        return examples.x, label_ids(examples, self.class_names)

    def with_class_names(self, class_names):
        """The same data labelled with `class_names` (a model's, in its order); a label outside them is named with its file and line."""
        data = dataclasses.replace(self, class_names=list(class_names))
        for split in data.splits:
            if data.task_type == "tagging":
                known = set(class_names)
                examples = data.examples(split)
                unknown = sorted({tag for tags in examples.tags for tag in tags} - known)
                if unknown:
                    raise ValueError(f"{examples.path}: the tag {unknown[0]!r} is not one of the model's tags "
                                     f"{list(class_names)}.")
            else:
                data.xy(split)
        return data

    def record(self):
        """What metrics.json keeps of the data: each file's path, sha256, rows and columns, the classes or tags."""
        record = {"task_type": self.task_type, "seed": self.seed, "validation_split": self.validation_split,
                  "files": {}}
        if self.task_type == "regression":
            record["label"] = self.examples(self.splits[0]).columns.get("label")
        if self.class_names is not None:
            record["tags" if self.task_type == "tagging" else "classes"] = list(self.class_names)
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


def task_type_of(path, task_type=None):
    """`task_type`, or the task a file's form says: a CoNLL extension tags, SQuAD JSON answers, else None (the labels say)."""
    if task_type is not None:
        if task_type not in TASK_TYPES:
            raise ValueError(f"Unknown task type {task_type!r}; kbert trains {list(TASK_TYPES)} from files.")
        return task_type
    extension = os.path.splitext(os.fspath(path))[1].lower()
    if extension in TAGGING_EXTENSIONS:
        return "tagging"
    if extension == ".json" and _is_squad(path):
        return "question-answering"
    if extension in (".jsonl", ".ndjson") and _has_choices(path):
        return "multiple-choice"
    return None


def _has_choices(path):
    """Whether a JSON Lines file's first record holds a list of texts under a name of `CHOICE_COLUMNS`."""
    import json

    from kbert.data.labelled_file import CHOICE_COLUMNS
    from kbert.io.text_files import read_text_lines

    for _, line in read_text_lines(path, allow_empty=True):
        if line.strip():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                return False  # the reader names the line
            return isinstance(record, dict) and any(
                isinstance(record.get(name), list) and record[name] and all(isinstance(c, str) for c in record[name])
                for name in CHOICE_COLUMNS)
    return False


def _is_squad(path):
    """Whether a .json file starts as SQuAD does: an object whose "data" (or "version") comes first."""
    with open(path, "rb") as file:
        start = file.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return start.startswith(b"{") and (b'"data"' in start or b'"version"' in start)


def read_file_data(train, validation=None, test=None, columns=None, labels=None, validation_split=0.1, seed=0,
                   task_type=None, tag_column=-1, scheme="auto"):
    """Reads the files of a run on the user's data (`kbert train --train ...`).

    Args:
        train, validation, test: the files: CSV, TSV or JSONL of texts and
            labels (`kbert.data.read_labelled_file`), CoNLL column files of
            tagged words (`kbert.data.read_conll`, any tag set), or
            SQuAD-format JSON (`kbert.data.load_squad`, v1.1 or v2.0).
        columns: keyword arguments of `read_labelled_file` (`text_column`,
            ...), the same for every file.
        labels: the class names (or tags) in id order; None takes them from
            the training file.
        validation_split: without a validation file, the part of the
            training file set aside to validate on (seeded).
        task_type: one of `TASK_TYPES`; None: from the training file.
        tag_column, scheme: of CoNLL files (`read_conll`).

    Raises:
        DataFormatError: a label or tag of the validation or test file that
            the training file does not have, named with its file and line.
    """
    task_type = task_type_of(train, task_type)
    if task_type == "tagging":
        return _tagging_data(train, validation, test, labels, validation_split, seed, tag_column, scheme)
    if task_type == "question-answering":
        return _question_data(train, validation, test, validation_split, seed)
    columns = columns or {}
    if task_type == "multiple-choice":
        return _choice_data(train, validation, test, columns, validation_split, seed)
    train_examples = read_labelled_file(train, **columns)
    task_type = task_type or label_kind(train_examples.labels)
    if task_type == "regression":
        label_scores(train_examples)
        class_names = None
    elif task_type == "multi-label":
        class_names = list(labels) if labels else sorted({name for names in label_lists(train_examples)
                                                          for name in names})
        if len(set(class_names)) != len(class_names) or not class_names:
            raise ValueError(f"{train}: the labels {class_names} are not a list of distinct names.")
        label_lists(train_examples, class_names)
    else:
        if label_kind(train_examples.labels) != "classification":
            raise SettingError(f"{train}: its labels are lists or fractional numbers; train them with `task_type` "
                               f"{label_kind(train_examples.labels)}, not {task_type}.", ["task_type"])
        class_names = _class_names(train, labels, class_names_of(train_examples.labels))
        label_ids(train_examples, class_names)  # a label outside `labels` is named with its line
    if validation is not None:
        validation_examples, fraction = read_labelled_file(validation, **columns), None
        train_part = train_examples
    else:
        if task_type == "classification":
            train_ids, validation_ids = stratified_split(label_ids(train_examples, class_names), validation_split,
                                                         seed)
        else:
            train_ids, validation_ids = random_split(len(train_examples), validation_split, seed)
        train_part, validation_examples = train_examples.subset(train_ids), train_examples.subset(validation_ids)
        fraction = validation_split
    test_examples = read_labelled_file(test, **columns) if test is not None else None
    data = FileData(train_part, validation_examples, test_examples, class_names, fraction, seed, task_type)
    for split, examples in (("validation", validation_examples), ("test", test_examples)):
        if examples is not None:
            if (examples.text_pairs is None) != (train_part.text_pairs is None):
                raise ValueError(f"{examples.path} has {'no ' if examples.text_pairs is None else ''}text pairs "
                                 f"where {train} has {'none' if train_part.text_pairs is None else 'them'}.")
            data.xy(split)  # every label checked, named with its file and line
    return data


def _class_names(train, labels, found):
    class_names = list(labels) if labels else found
    if len(set(class_names)) != len(class_names):
        raise ValueError(f"The class names {class_names} repeat a name.")
    if len(class_names) < 2:
        raise ValueError(f"{train}: every example has the label {class_names[0]!r}; a model needs two "
                         "classes or more.")
    return class_names


def _tagging_data(train, validation, test, labels, validation_split, seed, tag_column, scheme):
    from kbert.data.conll import read_conll

    def read(path, tags=None):
        sentences, sentence_tags = read_conll(path, scheme=scheme, labels=tags, num_columns=None,
                                              tag_column=tag_column)
        return TaggedSentences(os.fspath(path), sentences, sentence_tags, {"word": 0, "tag": tag_column})

    train_sentences = read(train, labels)
    tags = _class_names(train, labels, tag_set(train_sentences.tags))
    if validation is not None:
        validation_sentences, fraction, train_part = read(validation, tags), None, train_sentences
    else:
        train_ids, validation_ids = random_split(len(train_sentences), validation_split, seed)
        train_part, validation_sentences = train_sentences.subset(train_ids), train_sentences.subset(validation_ids)
        fraction = validation_split
    test_sentences = read(test, tags) if test is not None else None
    return FileData(train_part, validation_sentences, test_sentences, tags, fraction, seed, "tagging")


def tag_set(tags):
    """The tags of IOB2-tagged sentences as a tagger's labels: `O`, then `B-` and `I-` of each type, by type.

    Both tags of a type are kept even where the file has one of them, so a
    longer entity in other data can be tagged.

    >>> tag_set([["O", "B-DRUG"], ["B-DOSE", "I-DOSE", "O"]])
    ['O', 'B-DOSE', 'I-DOSE', 'B-DRUG', 'I-DRUG']
    """
    types = sorted({tag[2:] for sentence in tags for tag in sentence if tag != "O"})
    return ["O"] + [f"{prefix}-{entity_type}" for entity_type in types for prefix in ("B", "I")]


def _question_data(train, validation, test, validation_split, seed):
    from kbert.data.squad import load_squad

    def read(path):
        return Questions(os.fspath(path), load_squad(path=os.fspath(path)))

    train_questions = read(train)
    if validation is not None:
        validation_questions, fraction, train_part = read(validation), None, train_questions
    else:
        articles = [record["article"] for record in train_questions.records]
        train_ids, validation_ids = random_split(len(articles), validation_split, seed, groups=articles)
        train_part, validation_questions = train_questions.subset(train_ids), train_questions.subset(validation_ids)
        fraction = validation_split
    test_questions = read(test) if test is not None else None
    return FileData(train_part, validation_questions, test_questions, None, fraction, seed, "question-answering")


def _choice_data(train, validation, test, columns, validation_split, seed):
    def read(path):
        return read_labelled_file(path, choices=True, **columns)

    train_examples = read(train)
    num_choices = len(train_examples.text_pairs[0])
    if validation is not None:
        validation_examples, fraction, train_part = read(validation), None, train_examples
    else:
        train_ids, validation_ids = random_split(len(train_examples), validation_split, seed)
        train_part, validation_examples = train_examples.subset(train_ids), train_examples.subset(validation_ids)
        fraction = validation_split
    test_examples = read(test) if test is not None else None
    for examples in (validation_examples, test_examples):
        if examples is not None and len(examples.text_pairs[0]) != num_choices:
            raise ValueError(f"{examples.path} has {len(examples.text_pairs[0])} choices an example, where {train} "
                             f"has {num_choices}.")
    return FileData(train_part, validation_examples, test_examples, None, fraction, seed, "multiple-choice")


def random_split(count, fraction, seed=0, groups=None):
    """`(train indices, validation indices)`: a seeded `fraction` of `count` items, in order.

    With `groups` (one key per item, such as a question's article), whole
    groups go to one side, so that no context is on both; where there is
    one group only, items are split one by one.

    >>> random_split(10, 0.3, seed=1)
    ([0, 1, 2, 3, 5, 6, 9], [4, 7, 8])
    """
    if not 0 < fraction < 1:
        raise ValueError(f"The validation split must be between 0 and 1, got {fraction}.")
    if count < 2:
        raise ValueError(f"A validation split needs two examples or more; the training file has {count}.")
    rng = np.random.default_rng(seed)
    keys = list(range(count)) if groups is None or len(set(groups)) < 2 else list(groups)
    order = rng.permutation(sorted(set(keys), key=str)).tolist()
    target = max(1, round(count * fraction))
    chosen, taken = set(), 0
    sizes = {key: keys.count(key) for key in set(keys)} if groups is not None else None
    for key in order:
        size = sizes[key] if sizes else 1
        if taken >= target or len(chosen) == len(order) - 1 or (taken and taken + size > target):
            break
        chosen.add(key)
        taken += size
    validation = [i for i in range(count) if keys[i] in chosen]
    return [i for i in range(count) if keys[i] not in chosen], validation


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
    """A labelled file to score a classifier on (`kbert evaluate --data`), its labels checked against the model's."""
    task_type = {"single_label": "classification", "multi_label": "multi-label", "regression": "regression"}[
        getattr(model, "problem_type", "single_label")]
    class_names = getattr(model, "class_names", None)
    if not class_names and task_type != "regression":
        raise SettingError(f"{path}: the model has no class names, so the file's labels cannot be matched to its "
                           "classes; score it on a named data set with `task`.", ["task"])
    examples = read_labelled_file(path, **(columns or {}))
    data = FileData(None, None, examples, None if task_type == "regression" else list(class_names), None, 0,
                    task_type)
    data.xy("test")  # every label checked, named with its file and line
    return data


def read_evaluation_data(path, model, columns=None, tag_column=-1, scheme="auto"):
    """A file to score `model` on (`kbert evaluate --data`): labelled texts, tagged sentences or questions."""
    task_type = {"Tagger": "tagging", "QuestionAnswerer": "question-answering"}.get(type(model).__name__)
    if task_type == "tagging":
        from kbert.data.conll import read_conll

        sentences, tags = read_conll(path, scheme=scheme, labels=list(model.labels), num_columns=None,
                                     tag_column=tag_column)
        examples = TaggedSentences(os.fspath(path), sentences, tags, {"word": 0, "tag": tag_column})
        return FileData(None, None, examples, list(model.labels), None, 0, "tagging")
    if task_type == "question-answering":
        from kbert.data.squad import load_squad

        questions = Questions(os.fspath(path), load_squad(path=os.fspath(path)))
        return FileData(None, None, questions, None, None, 0, "question-answering")
    if type(model).__name__ == "MultipleChoice":
        examples = read_labelled_file(path, choices=True, **(columns or {}))
        if len(examples.text_pairs[0]) != model.num_choices:
            raise ValueError(f"{path} has {len(examples.text_pairs[0])} choices an example; the model takes "
                             f"{model.num_choices}.")
        return FileData(None, None, examples, None, None, 0, "multiple-choice")
    return read_evaluation_file(path, model, columns)
