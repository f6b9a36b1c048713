"""Fine-tuning and evaluation: what `kbert train` and `kbert evaluate` run.

A run reads a named data set or a user's files through its recipe
(`kbert.runs.recipes`), builds the task model, fits it, scores it and
writes a run folder (`fine_tune`).
"""

import os
import time
import warnings

import numpy as np

from kbert.io.setting_error import SettingError
from kbert.runs.fine_tuning_settings import FineTuningSettings
from kbert.runs.named_data import FILE_SPLITS, named_file_data
from kbert.runs.outputs import RUN_ADAPTER, RUN_MODEL
from kbert.runs.recipes import FILES, default_epochs, positive_class, problem_type, recipe, score_name

# The bert-base-uncased vocabulary ships with this checkpoint package.
DEFAULT_VOCABULARY_CHECKPOINT = "all-minilm-l6-v2"


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
                     attention_dropout=None, lowercase=True, lora=None):
    """The task's model from a preset name, a checkpoint (folder or name), or a `kbert.Encoder`.

    `attention_dropout`, when given, replaces the encoder's rate of dropout
    of attention probabilities. `lowercase` is the tokenizer's, for a
    `vocabulary` of tokens or a vocab.txt. `lora`, the builders' LoRA
    arguments (`lora_rank`, ...), fine-tunes adapters instead of the encoder.
    """
    from kbert.builders import TASK_BUILDERS
    from kbert.data.conll import CONLL2003_LABELS

    name, info = recipe(task)
    sequence_length = sequence_length or info.sequence_length
    arguments = dict(info.builder_arguments)
    if info.builder == "question_answerer":
        arguments["doc_stride"] = min(128, sequence_length // 2)
        arguments["max_question_length"] = min(64, sequence_length // 2)
    if info.builder == "tagger" and "labels" not in arguments:
        arguments["labels"] = list(CONLL2003_LABELS)
    if attention_dropout is not None:
        arguments["attention_dropout"] = attention_dropout
    arguments.update(lora or {})
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
    from kbert.backend.distribute import remove_worker_directory, worker_directory
    from kbert.callbacks.projector import write_projector
    from kbert.models.embedder import Embedder

    count = PROJECTED_TEXTS
    texts = tuple(side[:count] for side in texts) if isinstance(texts, tuple) else texts[:count]
    embedder = Embedder(classifier.encoder, classifier.preprocessor.packer, pooling="pooled")
    # Every worker embeds (prediction is collective under several workers); the chief's files stay.
    target = worker_directory(run_dir)
    try:
        write_projector(embedder, texts, target, labels=labels[:count],
                        class_names=classifier.class_names, batch_size=batch_size)
    finally:
        remove_worker_directory(target, run_dir)


def fine_tune(task, out, settings=None, **options):
    """Fine-tunes on a task's training split, evaluates, and writes a run folder.

    Args:
        task: a named data set (`kbert.runs.recipes.RECIPES`) or a user's files
            (`kbert.runs.own_data.FileData`).
        out: the run folder.
        settings: a `FineTuningSettings`; or its fields as keyword `options`
            (`fine_tune("sst2", "runs/a", encoder="mini", epochs=2)`).

    `epochs=None` trains `default_epochs` of the training examples: 3, or
    more on a small data set, for at least `kbert.runs.recipes.MIN_UPDATE_STEPS`
    updates.
    `fit` validates on the task's dev split (`kbert.runs.recipes.Recipe.fit_validation_split`:
    the evaluation split, or SICK's trial and CoNLL-2003's dev split), on
    the same seeded subset of `max_eval_examples` that the evaluation takes.

    `out` gets `model.keras` (the fitted model), for a LoRA model also
    `model.adapter` (its adapters, pooler and head alone:
    `TaskModel.save_adapter`), `metrics.json` (the evaluation split's
    metrics, the settings, examples seen and wall time), all written
    together (`kbert.runs.outputs.write_run`: killed before all are
    complete, `out` keeps its earlier run), and `tensorboard/`,
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

    from kbert.backend.distribute import is_chief
    from kbert.runs.outputs import clean_run_folder

    settings = FineTuningSettings.from_arguments(settings, **options)
    name, info = recipe(task)
    if name == FILES and settings.source != "local":
        raise SettingError("A run on files reads them; `source` is for the named data sets.", ["source"])
    os.makedirs(out, exist_ok=True)
    if is_chief():
        clean_run_folder(out)  # what a killed run left (`kbert train` has done so already)
    keras.utils.set_random_seed(settings.seed)
    vocabulary = _vocabulary_or_default(settings.encoder, settings.vocabulary)
    _check_casing(settings, vocabulary)
    model = build_task_model(task, settings.encoder, vocabulary, settings.sequence_length, settings.learning_rate,
                             settings.attention_dropout, lowercase=not settings.cased, lora=settings.lora)
    x, y = sample_examples(*load_split(task, info.splits[0], settings.source), settings.max_examples,
                           settings.seed)
    epochs = settings.epochs or default_epochs(len(y) if y is not None else len(x), settings.batch_size)
    record = _settings_record(task, settings, model, epochs)
    validation_x, validation_y = sample_examples(
        *load_split(task, info.fit_validation_split, settings.source), settings.max_eval_examples)
    log_dir = os.path.join(out, "tensorboard")
    callbacks, hparams = _fine_tuning_callbacks(info, record, log_dir, validation_x, validation_y,
                                                settings.batch_size)
    start = time.time()
    history = model.fit(
        x, y, epochs=epochs, batch_size=settings.batch_size, callbacks=callbacks, verbose=settings.verbose,
        **({"packing": True} if settings.packing else {}),
        # SQuAD's records hold their answers: no separate targets.
        validation_data=validation_x if validation_y is None else (validation_x, validation_y),
    )
    if info.builder == "classifier" and problem_type(info) == "multi_label":
        model.tune_thresholds(validation_x, validation_y, batch_size=settings.batch_size)  # each label's best F1
    result = {
        "train_examples": len(y) if y is not None else len(x),
        "train_seconds": time.time() - start,
        "final_train_loss": float(history.history["loss"][-1]),
        "validation_split": info.fit_validation_split,
        "settings": record,
        # What was trained and scored on: paths, sha256, rows and columns, the classes.
        **({"data": task.record()} if name == FILES else {}),
    }
    # The model and its metrics replace the folder's earlier run together, or not at all.
    write_run_on_chief(out, lambda folder: _write_fine_tuned(
        folder, model, task, settings, (hparams, log_dir), (validation_x, validation_y), result))
    return result


def _check_casing(settings, vocabulary):
    """Refuses `cased` for an encoder whose vocabulary's casing is fixed (no vocabulary file)."""
    from kbert.checkpoints.encoder_argument import pretraining_run_files

    file_vocabulary = isinstance(vocabulary, (str, os.PathLike, list, tuple)) or pretraining_run_files(
        settings.encoder)
    if settings.cased and not file_vocabulary:
        raise SettingError(f"`cased` applies to a vocabulary file (`vocabulary`, or a pretraining run's "
                           f"vocab.txt); {str(settings.encoder)!r} comes with a vocabulary whose casing is "
                           "fixed: give `vocabulary`, or drop `cased`.", ["cased", "vocabulary"])


def _settings_record(task, settings, model, epochs):
    """Everything that changes the result, for metrics.json and the HParams dashboard."""
    name, info = recipe(task)
    schedule = getattr(model.optimizer, "_learning_rate", None)
    record = {"task": name, "encoder": str(settings.encoder), "epochs": epochs,
              "batch_size": settings.batch_size,
              "sequence_length": settings.sequence_length or info.sequence_length,
              # The rate used, also when it is the model's default for the encoder width.
              "learning_rate": getattr(schedule, "peak_learning_rate", settings.learning_rate),
              "max_examples": settings.max_examples, "max_eval_examples": settings.max_eval_examples,
              "eval_split": info.eval_split, "seed": settings.seed, "source": settings.source}
    if name == FILES:
        record["train_file"] = task.train.path
    record["attention_dropout"] = model.encoder.attention_dropout
    record["packing"] = settings.packing
    lora = model.encoder.lora or {}
    record.update({"lora_rank": lora.get("rank"), "lora_alpha": lora.get("alpha"),
                   "lora_targets": ",".join(lora["targets"]) if lora else None})
    return record


def _fine_tuning_callbacks(info, record, log_dir, validation_x, validation_y, batch_size):
    """`(callbacks, hparams)`: what a fine-tuning run logs for TensorBoard, its HParams logger apart."""
    from kbert.callbacks.attention_map_logger import AttentionMapLogger
    from kbert.callbacks.confusion_matrix_logger import ConfusionMatrixLogger
    from kbert.callbacks.hparams_logger import HParamsLogger
    from kbert.callbacks.learning_rate_logger import LearningRateLogger
    from kbert.callbacks.tensorboard import TensorBoard

    hparams = HParamsLogger(
        log_dir, record, headline=score_name(info.eval_split, info.metric, positive_class(info)))
    callbacks = [
        LearningRateLogger(),
        TensorBoard(log_dir=log_dir, update_freq=50),
        hparams,
    ]
    if _single_label(info):
        callbacks.append(ConfusionMatrixLogger(
            log_dir, (validation_x, validation_y), batch_size=batch_size
        ))
        callbacks.append(AttentionMapLogger(
            log_dir, _first_text(validation_x), sequence_length=record["sequence_length"]
        ))
    return callbacks, hparams


def _single_label(info):
    return info.builder == "classifier" and problem_type(info) == "single_label"


def _write_fine_tuned(folder, model, task, settings, logs, validation, result):
    """Saves the model, scores it, and writes `metrics.json` (`result` then gets the scores first).

    `logs` is `(hparams, log_dir)`: the run's HParams logger, which gets the
    scores, and its TensorBoard folder, whose `validation/` gets the
    projector's vectors.
    """
    from kbert.io.atomic_files import json_text, write_text

    hparams, log_dir = logs
    name, info = recipe(task)
    model.save(os.path.join(folder, RUN_MODEL))
    if model.encoder.lora is not None:
        model.save_adapter(os.path.join(folder, RUN_ADAPTER))
    metrics = evaluate_task(model, task, max_examples=settings.max_eval_examples, batch_size=settings.batch_size,
                            source=settings.source)
    hparams.log_metrics({score_name(metrics["split"], key, metrics.get("positive_class")): value
                         for key, value in metrics.items() if isinstance(value, float)})
    warning = one_class_warning(metrics, getattr(model, "class_names", None))
    if warning:
        warnings.warn(warning, stacklevel=2)
    if _single_label(info):
        _write_projector(model, *validation, os.path.join(log_dir, "validation"), settings.batch_size)
    written = {**metrics, **result}
    result.clear()
    result.update(written)
    write_text(os.path.join(folder, "metrics.json"), json_text(result))


def one_class_warning(metrics, class_names=None):
    """A line saying the model answers one class for everything it was scored on (every word `O`); else None.

    Accuracy can look healthy then (the share of the commonest class), so
    `kbert train` says it in a warning (the settings named as its flags).

    >>> one_class_warning({"split": "dev", "examples": 4, "confusion_matrix": [[3, 0], [1, 0]]}, ["ham", "spam"])
    "The model answers 'ham' for all 4 dev examples: it has learnt only the commonest class; train longer (`epochs`), at a higher `learning_rate`, or on more data."
    """
    advice = "train longer (`epochs`), at a higher `learning_rate`, or on more data."
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
