"""The named data sets of `kbert train <task>`, read through the same path as a user's own files.

Each name is a `NamedFiles`: its files under `kbert.data.data_dir()`, their
columns and labels, and how its splits are cut where one file holds several
(SMS Spam's fixed 80/20, SICK's `SemEval_set` column, SQuAD's article ranges).
`named_file_data` reads one into the `FileData` that `kbert train --train
FILE` builds, so a named task and a user's file meet the same readers and
the same checks (file and line in every error).
"""

import dataclasses
import functools
import os

import numpy as np

from kbert.runs.own_data import FileData, Questions, read_file_data

# A recipe's split names -> a run on files' (`FileData.splits`).
FILE_SPLITS = {"train": "train", "dev": "validation", "trial": "validation", "eval": "validation", "test": "test"}


@dataclasses.dataclass(frozen=True)
class NamedFiles:
    """Where a named data set's files are and how they are read.

    `files` maps a run's splits ("train", "validation", "test") to paths
    under the data folder. A data set of one file gives the same path for
    each split and cuts it with `parts` ("sms_spam", "sick", "squad").
    """

    files: dict
    source: object  # a `kbert.data.paths.DataSource`, or a function of the file's path that gives one
    columns: dict = dataclasses.field(default_factory=dict)  # `read_labelled_file`'s column arguments
    labels: tuple = None  # the labels as the files write them, in the recipe's class order
    task_type: str = None
    parts: str = None  # how one file is cut into splits: "shuffled", "split_column" or "articles"
    split_values: dict = None  # "split_column": the column's value of each split

    def source_of(self, path):
        """Where to get the file `path` when the data folder lacks it."""
        return self.source(path) if callable(self.source) else self.source


def _glue(name, labels=None, columns=None, task_type=None):
    from kbert.data.glue import GLUE_TASKS
    from kbert.data.paths import DataSource

    folder = {"cola": "CoLA", "stsb": "STS-B", "wnli": "WNLI"}.get(name) or GLUE_TASKS[name].folder
    task = GLUE_TASKS.get(name)

    def source(path):  # SST-2's and RTE's zips hold `<folder>/<split>.tsv`
        if task is None or not task.downloadable:
            return DataSource(url="https://gluebenchmark.com/tasks", automatic=False)
        return DataSource(task.source_url, path.removeprefix("glue/"))

    return NamedFiles({"train": f"glue/{folder}/train.tsv", "validation": f"glue/{folder}/dev.tsv"}, source,
                      columns or {}, labels, task_type)


def _named_files():
    from kbert.data.conll import CONLL2003_SOURCE
    from kbert.data.sick import SICK_SOURCE
    from kbert.data.sms_spam import SMS_SPAM_FILE, SMS_SPAM_SOURCE
    from kbert.data.squad import SQUAD_DEV_SOURCE

    return {
        "sst2": _glue("sst2", ("0", "1")),
        "rte": _glue("rte", ("entailment", "not_entailment")),
        "mrpc": _glue("mrpc", ("0", "1"), {"text_column": "#1 String", "text_pair_column": "#2 String",
                                           "label_column": "Quality"}),
        "cola": _glue("cola", ("0", "1"), {"text_column": "sentence", "label_column": "label",
                                           "column_names": ("source", "label", "mark", "sentence")}),
        "stsb": _glue("stsb", columns={"label_column": "score"}, task_type="regression"),
        "wnli": _glue("wnli", ("0", "1")),
        "sms_spam": NamedFiles(dict.fromkeys(("train", "test"), SMS_SPAM_FILE), SMS_SPAM_SOURCE,
                               {"column_names": ("label", "text"), "file_format": "tsv"}, ("ham", "spam"),
                               parts="shuffled"),
        # The `SemEval_set` column, read as the id, says each pair's split.
        "sick": NamedFiles(dict.fromkeys(("train", "validation", "test"), "sick/SICK.txt"), SICK_SOURCE,
                           {"text_column": "sentence_A", "text_pair_column": "sentence_B",
                            "label_column": "entailment_label", "id_column": "SemEval_set", "file_format": "tsv"},
                           ("ENTAILMENT", "NEUTRAL", "CONTRADICTION"), parts="split_column",
                           split_values={"train": "TRAIN", "validation": "TRIAL", "test": "TEST"}),
        "squad": NamedFiles(dict.fromkeys(("train", "validation"), "squad/dev-v1.1.json"), SQUAD_DEV_SOURCE,
                            task_type="question-answering", parts="articles"),
        "conll2003": NamedFiles({"train": "conll2003/eng.train", "validation": "conll2003/eng.testa",
                                 "test": "conll2003/eng.testb"}, CONLL2003_SOURCE, task_type="tagging"),
    }


NAMED_FILES = _named_files()


@functools.lru_cache(maxsize=None)
def named_file_data(name, data_dir):
    """The `FileData` of the named data set `name` (a key of `NAMED_FILES`), read once per data folder.

    `data_dir` is `kbert.data.data_dir()`, where the files are looked up; it
    keys the cache, so a changed `KBERT_DATA` reads the files again.

    Example:
    >>> from kbert.data import data_dir
    >>> data = named_file_data("rte", str(data_dir()))
    >>> data.class_names, len(data.train), len(data.validation)
    (['entailment', 'not_entailment'], 2490, 277)
    """
    from kbert.data.paths import find_data_file

    spec = NAMED_FILES[name]
    paths = {split: os.fspath(find_data_file(path, spec.source_of(path))) for split, path in spec.files.items()}
    if spec.parts == "articles":
        return _article_parts(paths["train"])
    if spec.task_type == "tagging":
        from kbert.data.conll import CONLL2003_LABELS

        return read_file_data(paths["train"], paths["validation"], paths["test"], labels=CONLL2003_LABELS,
                              task_type="tagging", scheme="iob1")
    if spec.parts is None:
        return read_file_data(paths["train"], paths.get("validation"), paths.get("test"), columns=spec.columns,
                              labels=spec.labels, task_type=spec.task_type)
    whole = read_file_data(paths["train"], paths["train"], columns=spec.columns, labels=spec.labels)
    examples = whole.train
    if spec.parts == "shuffled":
        parts = _shuffled_parts(len(examples))
    else:
        parts = {split: [i for i, value in enumerate(examples.ids) if value == wanted]
                 for split, wanted in spec.split_values.items()}
        examples = dataclasses.replace(examples, ids=None, columns={**examples.columns, "id": None})
    subsets = {split: examples.subset(indices) for split, indices in parts.items()}
    return FileData(subsets["train"], subsets.get("validation"), subsets.get("test"), whole.class_names, None, 0,
                    whole.task_type)


def _shuffled_parts(count, seed=0, train_fraction=0.8):
    """SMS Spam's fixed split: a seeded shuffle, its first 80 % to train on and the rest to test on."""
    order = np.random.default_rng(seed).permutation(count)
    cut = int(count * train_fraction)
    return {"train": order[:cut].tolist(), "test": order[cut:].tolist()}


def _article_parts(path):
    """SQuAD v1.1 dev cut by article: `kbert.data.squad_article_split`'s ranges, no context on both sides."""
    from kbert.data.squad import load_squad, squad_article_split

    train_articles, eval_articles = squad_article_split()
    train, validation = (Questions(path, load_squad(path=path, articles=articles))
                         for articles in (train_articles, eval_articles))
    return FileData(train, validation, None, None, None, 0, "question-answering")
