"""Fine-tuning and evaluation on the canonical data sets: what `kbert train` and `kbert evaluate` run.

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

`fine_tune` validates each epoch on the dev split: the evaluation split,
except for SICK (its trial split) and CoNLL-2003 (its dev split).
"""

import math
import os
import time
import warnings
from dataclasses import dataclass

import numpy as np

from kbert.runs.named_data import FILE_SPLITS, named_file_data
from kbert.runs.own_data import FILE_SEQUENCE_LENGTH, FileData

# The bert-base-uncased vocabulary ships with this checkpoint package.
DEFAULT_VOCABULARY_CHECKPOINT = "all-minilm-l6-v2"


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


# The tasks whose data TensorFlow Datasets also has (`load_split(..., source="tfds")`).
TFDS_TASKS = ("sst2", "rte", "mrpc", "squad", "conll2003")


def load_split(task, split, source="local"):
    """`(x, y)` of one split: texts or pairs and label ids; SQuAD records and None; words and tags.

    `source="tfds"` reads GLUE, SQuAD and CoNLL-2003 from TensorFlow Datasets;
    SQuAD then trains on SQuAD v1.1 train and evaluates on its dev set ("eval")
    rather than on the two article ranges of dev.
    """
    from kbert import data

    name, info = recipe(task)
    if name == FILES:
        return task.xy(split)
    if split not in info.splits:
        raise ValueError(f"Task {name!r} has the splits {list(info.splits)}, not {split!r}.")
    if data.tfds_source.check_source(source) == "tfds":
        if name not in TFDS_TASKS:
            raise ValueError(f"Task {name!r} has no TFDS source; the tasks with one are {list(TFDS_TASKS)}.")
        if name == "squad":
            return data.load_squad(source="tfds", split="train" if split == "train" else "dev"), None
        if name == "conll2003":
            return data.load_conll2003(split, source="tfds")
        return data.load_glue(name, split, source="tfds")
    # Every named data set is read as a user's files are.
    return named_file_data(name, str(data.data_dir())).xy(FILE_SPLITS[split])


def sample_examples(x, y, count, seed=0):
    """A seeded random subset of `count` examples (all of them when `count` is None)."""
    size = len(y) if y is not None else len(x)
    if count is None or count >= size:
        return x, y
    order = np.sort(np.random.default_rng(seed).permutation(size)[:count])

    def pick(values):
        if isinstance(values, tuple):
            return tuple(pick(v) for v in values)
        return [values[i] for i in order]

    return pick(x), (None if y is None else pick(y))


def build_task_model(task, encoder, vocabulary=None, sequence_length=None, learning_rate=None,
                     attention_dropout=None, lowercase=True):
    """The task's model from a preset name, a checkpoint (folder or name), or a `kbert.Encoder`.

    `attention_dropout`, when given, replaces the encoder's rate of dropout
    of attention probabilities. `lowercase` is the tokenizer's, for a
    `vocabulary` of tokens or a vocab.txt.
    """
    import kbert
    from kbert.builders import TASK_BUILDERS

    name, info = recipe(task)
    sequence_length = sequence_length or info.sequence_length
    arguments = dict(info.builder_arguments)
    if info.builder == "question_answerer":
        arguments["doc_stride"] = min(128, sequence_length // 2)
        arguments["max_question_length"] = min(64, sequence_length // 2)
    if info.builder == "tagger" and "labels" not in arguments:
        arguments["labels"] = list(kbert.data.CONLL2003_LABELS)
    if attention_dropout is not None:
        arguments["attention_dropout"] = attention_dropout
    model = TASK_BUILDERS[info.builder](
        encoder, vocabulary=vocabulary, sequence_length=sequence_length, lowercase=lowercase,
        **arguments
    )
    if learning_rate is not None:
        model.compile(learning_rate=learning_rate)
    return model


def evaluate_task(model, task, split=None, max_examples=None, batch_size=None, source="local"):
    """The task's metrics of a fitted model on one split (default: the task's evaluation split)."""
    name, info = recipe(task)
    split = split or info.eval_split
    x, y = sample_examples(*load_split(task, split, source), max_examples)
    arguments = dict(info.report_arguments)
    report = model.evaluate_report(x, y, batch_size=batch_size, **arguments)
    result = {"task": name, "split": split, "source": source, "examples": len(y) if y is not None else len(x)}
    if name == FILES:
        result["file"] = task.examples(split).path
    if positive_class(info) is not None:
        result["positive_class"] = positive_class(info)  # whose precision, recall and F1 these are
    return {**result, **report}


def _vocabulary_or_default(encoder, vocabulary):
    """`vocabulary`; for a preset given none, the bert-base-uncased vocabulary that `kbert train` assumes."""
    from kbert.models.presets import PRESETS

    if vocabulary is None and isinstance(encoder, str) and encoder in PRESETS:
        from kbert.checkpoints import load_pretrained

        _, vocabulary = load_pretrained(DEFAULT_VOCABULARY_CHECKPOINT)
    return vocabulary


# The validation texts whose vectors `fine_tune` writes for the Projector (the first ones).
PROJECTED_TEXTS = 1000


def _first_text(texts):
    """The first text, or `(text_a, text_b)` pair, of a split."""
    return (texts[0][0], texts[1][0]) if isinstance(texts, tuple) else texts[0]


def _write_projector(classifier, texts, labels, run_dir, batch_size):
    """The pooled [CLS] vectors of the first `PROJECTED_TEXTS` texts, which the classifier's head reads."""
    import kbert
    from kbert.backend.distribute import remove_worker_directory, worker_directory

    count = PROJECTED_TEXTS
    texts = tuple(side[:count] for side in texts) if isinstance(texts, tuple) else texts[:count]
    embedder = kbert.Embedder(classifier.encoder, classifier.preprocessor.packer, pooling="pooled")
    # Every worker embeds (prediction is collective under several workers); the chief's files stay.
    target = worker_directory(run_dir)
    try:
        kbert.callbacks.write_projector(embedder, texts, target, labels=labels[:count],
                                        class_names=classifier.class_names, batch_size=batch_size)
    finally:
        remove_worker_directory(target, run_dir)


def fine_tune(task, encoder, out, vocabulary=None, epochs=None, batch_size=32, sequence_length=None,
              learning_rate=None, max_examples=None, max_eval_examples=None, seed=0, verbose=1,
              source="local", attention_dropout=None, lowercase=True):
    """Fine-tunes on a task's training split, evaluates, and writes a run folder.

    `epochs=None` trains `default_epochs` of the training examples: 3, or
    more on a small data set, for at least `MIN_UPDATE_STEPS` updates.

    `lowercase=False` (`kbert train --cased`) keeps the case of the text, for
    a cased `vocabulary` (or a pretraining run's cased vocab.txt).

    `source` is where the data comes from: "local" (the canonical files) or
    "tfds" (TensorFlow Datasets; see `load_split`). `fit` validates on the
    task's dev split (`Recipe.fit_validation_split`: the evaluation split,
    or SICK's trial and CoNLL-2003's dev split), on the same seeded subset
    of `max_eval_examples` that the evaluation takes.
    `attention_dropout`, when given, replaces the encoder's dropout rate of
    attention probabilities (see `kbert.Encoder`).

    `out` gets `model.keras` (the fitted model), `metrics.json` (the
    evaluation split's metrics, the settings, examples seen and wall time),
    both written together (`kbert.runs.outputs.write_run`: killed before
    both are complete, `out` keeps its earlier run), and `tensorboard/`,
    written as the run goes:

    - `train/` and `validation/`: the loss, the metrics and the learning
      rate per epoch (`epoch/...`), and every 50 steps (`steps/...`;
      `kbert.callbacks.TensorBoard`);
    - for classifiers, `validation/` also gets the confusion matrix of each
      epoch (an image), per-class precision, recall and F1 and a report
      table (`kbert.callbacks.ConfusionMatrixLogger`), and, after training,
      the sentence vectors of up to `PROJECTED_TEXTS` validation texts
      labelled by class for the Projector (`kbert.callbacks.write_projector`);
      `train/` gets the attention maps of the first validation text at each
      epoch end (`kbert.callbacks.AttentionMapLogger`);
    - `hparams/`: the settings, the final epoch's logs and the evaluation
      split's scores (`score/dev_accuracy`, `score/test_f1_spam`, ..., and the
      task's metric first as `score`) for TensorBoard's HParams dashboard
      (`kbert.callbacks.HParamsLogger`), in a row named after the run.

    Returns:
        The dict written to `metrics.json`.
    """
    import keras

    import kbert
    from kbert.backend.distribute import is_chief
    from kbert.checkpoints.encoder_argument import pretraining_run_files
    from kbert.io.atomic_files import json_text, write_text
    from kbert.runs.outputs import clean_run_folder

    name, info = recipe(task)
    if name == FILES and source != "local":
        raise ValueError("A run on files reads them; `source` is for the named data sets.")
    os.makedirs(out, exist_ok=True)
    if is_chief():
        clean_run_folder(out)  # what a killed run left (`kbert train` has done so already)
    # Everything that changes the result, for metrics.json and the HParams dashboard.
    settings = {"task": name, "encoder": str(encoder), "epochs": epochs, "batch_size": batch_size,
                "sequence_length": sequence_length or info.sequence_length,
                "learning_rate": learning_rate, "max_examples": max_examples,
                "max_eval_examples": max_eval_examples, "eval_split": info.eval_split, "seed": seed,
                "source": source}
    if name == FILES:
        settings["train_file"] = task.train.path
    keras.utils.set_random_seed(seed)
    vocabulary = _vocabulary_or_default(encoder, vocabulary)
    file_vocabulary = isinstance(vocabulary, (str, os.PathLike, list, tuple)) or pretraining_run_files(encoder)
    if not (lowercase or file_vocabulary):
        raise ValueError(f"--cased applies to a vocabulary file (--vocabulary, or a pretraining run's "
                         f"vocab.txt); {settings['encoder']!r} comes with a vocabulary whose casing is "
                         "fixed: give --vocabulary, or drop --cased.")
    model = build_task_model(task, encoder, vocabulary, sequence_length, learning_rate, attention_dropout,
                             lowercase)
    settings["attention_dropout"] = model.encoder.attention_dropout
    schedule = getattr(model.optimizer, "_learning_rate", None)
    # The rate used, also when it is the model's default for the encoder width.
    settings["learning_rate"] = getattr(schedule, "peak_learning_rate", learning_rate)
    x, y = sample_examples(*load_split(task, info.splits[0], source), max_examples, seed)
    if epochs is None:
        epochs = settings["epochs"] = default_epochs(len(y) if y is not None else len(x), batch_size)
    validation_x, validation_y = sample_examples(*load_split(task, info.fit_validation_split, source),
                                                 max_eval_examples)
    log_dir = os.path.join(out, "tensorboard")
    hparams = kbert.callbacks.HParamsLogger(
        log_dir, settings, headline=score_name(info.eval_split, info.metric, positive_class(info)))
    callbacks = [
        kbert.callbacks.LearningRateLogger(),
        kbert.callbacks.TensorBoard(log_dir=log_dir, update_freq=50),
        hparams,
    ]
    single_label = info.builder == "classifier" and problem_type(info) == "single_label"
    if single_label:
        callbacks.append(kbert.callbacks.ConfusionMatrixLogger(
            log_dir, (validation_x, validation_y), batch_size=batch_size
        ))
        callbacks.append(kbert.callbacks.AttentionMapLogger(
            log_dir, _first_text(validation_x), sequence_length=settings["sequence_length"]
        ))
    start = time.time()
    history = model.fit(
        x, y, epochs=epochs, batch_size=batch_size, callbacks=callbacks, verbose=verbose,
        # SQuAD's records hold their answers: no separate targets.
        validation_data=validation_x if validation_y is None else (validation_x, validation_y),
    )
    if info.builder == "classifier" and problem_type(info) == "multi_label":
        model.tune_thresholds(validation_x, validation_y, batch_size=batch_size)  # each label's best F1
    seconds = time.time() - start
    result = {}

    def write(folder):
        model.save(os.path.join(folder, "model.keras"))
        metrics = evaluate_task(model, task, max_examples=max_eval_examples, batch_size=batch_size,
                                source=source)
        hparams.log_metrics({score_name(metrics["split"], key, metrics.get("positive_class")): value
                             for key, value in metrics.items() if isinstance(value, float)})
        warning = one_class_warning(metrics, getattr(model, "class_names", None))
        if warning:
            warnings.warn(warning, stacklevel=2)
        if single_label:
            _write_projector(model, validation_x, validation_y, os.path.join(log_dir, "validation"),
                             batch_size)
        result.update({
            **metrics,
            "train_examples": len(y) if y is not None else len(x),
            "train_seconds": seconds,
            "final_train_loss": float(history.history["loss"][-1]),
            "validation_split": info.fit_validation_split,
            "settings": settings,
            # What was trained and scored on: paths, sha256, rows and columns, the classes.
            **({"data": task.record()} if name == FILES else {}),
        })
        write_text(os.path.join(folder, "metrics.json"), json_text(result))

    # The model and its metrics replace the folder's earlier run together, or not at all.
    write_run_on_chief(out, write)
    return result


def one_class_warning(metrics, class_names=None):
    """A line saying the model answers one class for everything it was scored on (every word `O`); else None.

    Accuracy can look healthy then (the share of the commonest class), so
    `kbert train` says it in a warning.

    >>> one_class_warning({"split": "dev", "examples": 4, "confusion_matrix": [[3, 0], [1, 0]]}, ["ham", "spam"])
    "The model answers 'ham' for all 4 dev examples: it has learnt only the commonest class; train longer (--epochs), at a higher --learning-rate, or on more data."
    """
    advice = "train longer (--epochs), at a higher --learning-rate, or on more data."
    where = f"{metrics.get('split', 'evaluation')} examples"
    matrix = metrics.get("confusion_matrix")
    if matrix is not None:
        predicted = np.asarray(matrix).sum(axis=0)
        if np.count_nonzero(predicted) == 1 and len(predicted) > 1:
            answer = int(np.flatnonzero(predicted)[0])
            name = repr(class_names[answer]) if class_names else f"class {answer}"
            return (f"The model answers {name} for all {metrics['examples']:,} {where}: it has learnt only the "
                    f"commonest class; {advice}")
    if metrics.get("predicted") == 0 and metrics.get("support", 0) > 0:  # entity scores
        return (f"The model tags no entity in the {metrics['examples']:,} {where} (every word 'O'), where "
                f"there are {metrics['support']:,}; {advice}")
    return None


def write_run_on_chief(out, write):
    """`kbert.runs.outputs.write_run(out, write)` on the chief; the other workers write into a copy, then removed.

    Every worker runs `write` (saving and evaluating are collective under
    several workers); only the chief's files are kept.
    """
    from kbert.backend.distribute import is_chief, remove_worker_directory, worker_directory
    from kbert.runs.outputs import write_run

    if is_chief():
        write_run(out, write)
        return
    folder = worker_directory(out)
    try:
        write(folder)
    finally:
        remove_worker_directory(folder, out)
