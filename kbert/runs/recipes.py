"""The named data sets as recipes, and a user's files as one: how each is read, modelled and scored.

Each data set name maps to a `Recipe`: its reader, its model, its default
splits and the metric its community reports (`RECIPES`):

==========  =========================  ==============  ============  =====================
task        data                       model           eval split    metric
==========  =========================  ==============  ============  =====================
sst2        GLUE SST-2                 classifier      dev           accuracy
sms_spam    SMS Spam (fixed 80/20)     classifier      test          spam F1, accuracy
rte         GLUE RTE (pairs)           classifier      dev           accuracy
mrpc        GLUE MRPC (pairs)          classifier      dev           F1, accuracy
sick        SICK, 3-class NLI (pairs)  classifier      test          accuracy
squad       SQuAD v1.1 dev, articles   question        articles      EM, F1
            0-37 / 38-47               answerer        38-47
conll2003   CoNLL-2003 English NER     tagger          test (testb)  entity F1
==========  =========================  ==============  ============  =====================

(and GLUE's cola, stsb and wnli). A run on a user's files has the recipe
its task type gives (`file_recipe`). `kbert.runs.fine_tuning.fine_tune`
validates each epoch on the dev split: the evaluation split, except for
SICK (its trial split) and CoNLL-2003 (its dev split).
"""

import math
from dataclasses import dataclass

from kbert.runs.own_data import FILE_SEQUENCE_LENGTH, FileData


@dataclass(frozen=True)
class Recipe:
    """How one data set is read, modelled and scored: what `kbert train <name>` runs."""

    builder: str  # the entry point in `kbert.builders.TASK_BUILDERS`
    splits: tuple  # the names `load_split` takes; the first trains
    eval_split: str
    metric: str  # the headline metric's key in `evaluate_task`'s result
    sequence_length: int
    builder_arguments: tuple = ()  # (name, value) pairs for the builder
    report_arguments: tuple = ()  # (name, value) pairs for `evaluate_report`
    validation_split: str = None  # the split `fit` validates on each epoch; default `eval_split`

    @property
    def fit_validation_split(self):
        """The split whose loss and metrics `fine_tune` draws each epoch: the dev split if any."""
        return self.validation_split or self.eval_split


def _classification(splits, eval_split, metric, sequence_length, class_names, positive_class=1,
                    validation_split=None):
    return Recipe("classifier", splits, eval_split, metric, sequence_length,
                  (("num_classes", len(class_names)), ("class_names", list(class_names))),
                  (("positive_class", positive_class),), validation_split)


RECIPES = {
    "sst2": _classification(("train", "dev"), "dev", "accuracy", 64, ("negative", "positive")),
    "sms_spam": _classification(("train", "test"), "test", "f1", 64, ("ham", "spam")),
    "rte": _classification(("train", "dev"), "dev", "accuracy", 128,
                           ("entailment", "not_entailment"), positive_class=0),
    "mrpc": _classification(("train", "dev"), "dev", "f1", 128, ("not_paraphrase", "paraphrase")),
    # SICK's trial split is its dev split.
    "sick": _classification(("train", "trial", "test"), "test", "accuracy", 64,
                            ("entailment", "neutral", "contradiction"), validation_split="trial"),
    # GLUE's CoLA (Matthews' correlation), STS-B (a score: Pearson) and WNLI.
    "cola": _classification(("train", "dev"), "dev", "matthews_correlation", 64, ("unacceptable", "acceptable")),
    "stsb": Recipe("classifier", ("train", "dev"), "dev", "pearson", 128,
                   (("num_classes", 1), ("problem_type", "regression"))),
    "wnli": _classification(("train", "dev"), "dev", "accuracy", 128, ("not_entailment", "entailment")),
    "squad": Recipe("question_answerer", ("train", "eval"), "eval", "f1", 384),
    "conll2003": Recipe("tagger", ("train", "dev", "test"), "test", "f1", 128, validation_split="dev"),
}


# The scores of one class, which two-class tasks report for their positive
# class: TensorBoard names them with it, `score/test_f1_spam`.
CLASS_SCORES = ("precision", "recall", "f1")


def score_name(split, key, positive_class=None):
    """A score's name in TensorBoard (`score/<name>`): `<split>_<key>`, and the class for a score of one class.

    >>> score_name("test", "f1", "spam"), score_name("dev", "accuracy", "paraphrase")
    ('test_f1_spam', 'dev_accuracy')
    """
    if positive_class is not None and key in CLASS_SCORES:
        return f"{split}_{key}_{positive_class}"
    return f"{split}_{key}"


def problem_type(info):
    """A classifier recipe's head: "single_label", "multi_label" or "regression"."""
    return dict(info.builder_arguments).get("problem_type", "single_label")


def positive_class(info):
    """The name of the class whose precision, recall and F1 a two-class recipe reports; None for others."""
    if problem_type(info) != "single_label":
        return None
    class_names = dict(info.builder_arguments).get("class_names")
    if class_names is None or len(class_names) != 2:
        return None
    return class_names[dict(info.report_arguments).get("positive_class", 1)]


def recipe(name):
    """`(name, Recipe)` of a data set name, forgiving case, dashes and underscores; `("files", ...)` of a `FileData`."""
    if isinstance(name, FileData):
        return FILES, file_recipe(name)
    key = str(name).lower().replace("-", "").replace("_", "")
    for known, found in RECIPES.items():
        if known.replace("_", "") == key:
            return known, found
    raise ValueError(f"Unknown task {name!r}; the tasks are {sorted(RECIPES)}.")


# The default recipe's length: at least `DEFAULT_EPOCHS` epochs and
# `MIN_UPDATE_STEPS` updates, so that a small data set (1,000 sentences make
# 32 steps an epoch) trains long enough to learn more than its commonest
# class; at most `MAX_DEFAULT_EPOCHS` epochs (benchmarks/README.rst,
# "Small data sets").
DEFAULT_EPOCHS = 3
MIN_UPDATE_STEPS = 400
MAX_DEFAULT_EPOCHS = 20


def default_epochs(train_examples, batch_size):
    """The epochs of the default recipe: 3, or more where that makes fewer than `MIN_UPDATE_STEPS` updates.

    >>> default_epochs(67_349, 32), default_epochs(1_500, 32), default_epochs(100, 32)
    (3, 9, 20)
    """
    steps = max(1, math.ceil(train_examples / batch_size))
    return int(min(MAX_DEFAULT_EPOCHS, max(DEFAULT_EPOCHS, math.ceil(MIN_UPDATE_STEPS / steps))))


# The task name of a run on the user's own files (`kbert train --train FILE`).
FILES = "files"


def file_recipe(data):
    """The recipe of a run on files, by its task type: scored on the test file, or else on the validation data."""
    validation = "validation" if data.validation is not None else None
    if data.task_type == "tagging":
        return Recipe("tagger", data.splits, data.eval_split, "f1", FILE_SEQUENCE_LENGTH,
                      (("labels", list(data.class_names)),), validation_split=validation)
    if data.task_type == "question-answering":
        return Recipe("question_answerer", data.splits, data.eval_split, "f1", 384, validation_split=validation)
    if data.task_type == "multiple-choice":
        choices = len(data.examples(data.splits[0]).text_pairs[0])
        return Recipe("multiple_choice", data.splits, data.eval_split, "accuracy", FILE_SEQUENCE_LENGTH,
                      (("num_choices", choices),), validation_split=validation)
    if data.task_type == "regression":
        return Recipe("classifier", data.splits, data.eval_split, "pearson", FILE_SEQUENCE_LENGTH,
                      (("num_classes", 1), ("problem_type", "regression")), validation_split=validation)
    if data.task_type == "multi-label":
        return Recipe("classifier", data.splits, data.eval_split, "micro_f1", FILE_SEQUENCE_LENGTH,
                      (("num_classes", len(data.class_names)), ("class_names", list(data.class_names)),
                       ("problem_type", "multi_label")), validation_split=validation)
    two_classes = len(data.class_names) == 2
    return _classification(data.splits, data.eval_split, "f1" if two_classes else "accuracy",
                           FILE_SEQUENCE_LENGTH, data.class_names, validation_split=validation)
