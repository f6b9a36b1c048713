"""Distillation and pruning runs on the canonical data sets: what `kbert distill` and `kbert prune` run.

Each run reads a fine-tuned task model (the `model.keras` of `kbert train`),
trains on the task's training split (see `kbert.runs.recipes.RECIPES`), and
writes a run folder as `kbert train` does: `model.keras` and `metrics.json`
(the evaluation split's metrics, the settings, the budget), written together
(`kbert.runs.outputs.write_run`), and `tensorboard/` (each loss part its
own scalar).
"""

import dataclasses
import os
import time

import numpy as np

from kbert.io.atomic_files import json_text, write_text
from kbert.io.setting_error import SettingError
from kbert.runs.distillation_settings import DistillationSettings
from kbert.runs.fine_tuning import evaluate_task, load_split, sample_examples
from kbert.runs.outputs import clean_run_folder, write_run
from kbert.runs.pruning_settings import PruningSettings
from kbert.runs.recipes import recipe

STUDENT_LAYERS_PREFIX = "layers:"


def distill_task(task, teacher, out, settings=None, **options):
    """Distils a fine-tuned classifier into a smaller student, evaluates it, and writes a run folder.

    The stages, each optional but the last (TinyBERT's order):

    1. general distillation: the student encoder learns the teacher
       encoder's embeddings, hidden states and attention maps on raw text
       (`general_corpus`, `general_steps` steps; `kbert.LayerwiseDistiller`);
    2. task-specific layer-wise distillation on the task's texts
       (`layerwise_epochs`);
    3. task distillation (`kbert.Distiller`): the labelled training
       examples plus a transfer set the teacher labels: `unlabeled` texts
       and/or `transfer_examples` more training examples whose labels are
       dropped.

    Args:
        task: a classification task of `kbert.runs.recipes.RECIPES`, or
            a user's files.
        teacher: the fine-tuned teacher, a `kbert.Classifier` or the path of
            its `.keras` file.
        out: the run folder to write.
        settings: a `DistillationSettings`; or its fields as keyword
            `options` (`student="layers:0,2"`, `epochs=1`, ...).

    Returns:
        The dict written to `metrics.json`.
    """
    import keras

    from kbert.callbacks.tensorboard import TensorBoard
    from kbert.models.classifier import Classifier
    from kbert.models.distiller import Distiller
    from kbert.saving import load_model

    settings = DistillationSettings.from_arguments(settings, **options)
    name, info = recipe(task)
    if info.builder != "classifier":
        raise ValueError(f"`kbert distill` distils classifiers; {name!r} is a {info.builder} task.")
    teacher_path = teacher if isinstance(teacher, str) else None
    if teacher_path is not None:
        teacher = load_model(teacher_path)
    if not isinstance(teacher, Classifier):
        raise ValueError(f"The teacher must be a kbert.Classifier, got {type(teacher).__name__}.")
    teacher = teacher.merge_lora()  # the same answers; a student of its layers copies plain ones
    task = classes_of_the_model(task, teacher)
    _start_run(out)
    record = {"task": name, **_data_settings(task), "teacher": teacher_path, **_record(settings)}
    keras.utils.set_random_seed(settings.seed)
    all_x, all_y = load_split(task, info.splits[0])
    x, y = sample_examples(all_x, all_y, settings.max_examples, settings.seed)
    transfer = _transfer_set(all_x, len(all_y), settings.max_examples, settings.transfer_examples,
                             settings.unlabeled, settings.seed)
    log_dir = os.path.join(out, "tensorboard")
    encoder = student_encoder(settings.student, teacher, settings.seed)
    transfer_count = len(transfer[0]) if isinstance(transfer, tuple) else len(transfer)
    budget = {"labelled_examples": len(y), "transfer_examples": transfer_count}
    start = time.time()
    if settings.general_steps:
        from kbert.pretraining.documents import corpus_files

        texts = read_text_lines(corpus_files(settings.general_corpus))
        encoder = _layerwise(teacher, encoder, texts, settings, os.path.join(log_dir, "general"),
                             steps=settings.general_steps)
        budget["general_texts"] = len(texts)
    if settings.layerwise_epochs:
        texts = tuple(a + b for a, b in zip(x, transfer)) if isinstance(x, tuple) else list(x) + transfer
        encoder = _layerwise(teacher, encoder, texts, settings, os.path.join(log_dir, "layerwise"),
                             epochs=settings.layerwise_epochs)
    distiller = Distiller(teacher, encoder, temperature=settings.temperature, alpha=settings.alpha)
    distiller.compile(learning_rate=settings.learning_rate)
    validation = sample_examples(*load_split(task, info.fit_validation_split), settings.max_eval_examples)
    history = distiller.fit(
        x, y, unlabeled=transfer if transfer_count else None, epochs=settings.epochs,
        batch_size=settings.batch_size, verbose=settings.verbose, validation_data=validation,
        callbacks=[TensorBoard(log_dir=os.path.join(log_dir, "distill"), update_freq=50)],
    )
    seconds = time.time() - start
    model = distiller.student
    return _write_run(out, model, task, settings, lambda metrics: {
        **metrics,
        "parameters": model.count_params(),
        "teacher_parameters": teacher.count_params(),
        "train_seconds": seconds,
        "final_train_loss": float(history.history["loss"][-1]),
        "budget": budget,
        "settings": record,
    })


def prune_task(task, model, out, settings=None, **options):
    """Prunes a fine-tuned task model while it trains on the task further, evaluates it, writes a run folder.

    Attention heads go first (`heads`: the share of all heads removed, least
    important first by Michel et al.'s measure on `importance_examples`
    training examples; the model gets smaller and faster); then weights
    (`sparsity`: the share of each Transformer kernel's weights set to
    zero by magnitude on Zhu and Gupta's schedule during the `epochs` of
    training, `kbert.MagnitudePruning`). `metrics.json` holds the
    evaluation and the sparsity report (`kbert.compression.sparsity`).

    Args:
        task: a named data set of `kbert.runs.recipes.RECIPES`, or a
            user's files.
        model: the fine-tuned task model, or the path of its `.keras` file.
        out: the run folder to write.
        settings: a `PruningSettings`; or its fields as keyword `options`.
    """
    import keras

    from kbert.callbacks.tensorboard import TensorBoard
    from kbert.compression.head_pruning import head_importance, prune_heads
    from kbert.compression.magnitude_pruning import MagnitudePruning
    from kbert.compression.sparsity import sparsity
    from kbert.saving import load_model

    settings = PruningSettings.from_arguments(settings, **options)
    name, info = recipe(task)
    model_path = model if isinstance(model, str) else None
    if model_path is not None:
        model = load_model(model_path)
    model = model.merge_lora()  # a LoRA model's adapters folded in: pruning prunes what it learned
    task = classes_of_the_model(task, model)
    _start_run(out)
    record = {"task": name, **_data_settings(task), "model": model_path, **_record(settings)}
    keras.utils.set_random_seed(settings.seed)
    x, y = sample_examples(*load_split(task, info.splits[0]), settings.max_examples, settings.seed)
    parameters_before = model.count_params()
    start = time.time()
    if settings.heads:
        sample_x, sample_y = sample_examples(x, y, settings.importance_examples, settings.seed)
        importance = head_importance(model, sample_x, sample_y, batch_size=settings.batch_size)
        model = prune_heads(model, fraction=settings.heads, importance=importance)
    callbacks = [TensorBoard(log_dir=os.path.join(out, "tensorboard"), update_freq=50)]
    if settings.sparsity:
        callbacks.append(MagnitudePruning(settings.sparsity, scope=settings.scope, rewind=settings.rewind))
    model.compile(learning_rate=settings.learning_rate)
    validation = sample_examples(*load_split(task, info.fit_validation_split), settings.max_eval_examples)
    model.fit(x, y, epochs=settings.epochs, batch_size=settings.batch_size, verbose=settings.verbose,
              validation_data=validation, callbacks=callbacks)
    seconds = time.time() - start
    return _write_run(out, model, task, settings, lambda metrics: {
        **metrics,
        "parameters_before": parameters_before,
        "parameters": model.count_params(),
        "sparsity": sparsity(model),
        "train_seconds": seconds,
        "settings": record,
    })


def _record(settings):
    """A run's settings for metrics.json: each field, an encoder object named, without Keras' verbosity."""
    record = {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)
              if field.name not in ("verbose", "max_eval_examples", "unlabeled", "general_corpus")}
    if "student" in record:
        record["student"] = str(record["student"])
    return record


def student_encoder(student, teacher, seed=0):
    """The student `kbert.Encoder` that `student` names (see `distill_task`).

    `"layers:0,2,4"` is a copy of the teacher's layers; any other form is
    resolved by `kbert.checkpoints.resolve_encoder`, a preset embedding the
    teacher's vocabulary.
    """
    import keras

    from kbert.checkpoints.encoder_argument import UnknownEncoderError, resolve_encoder

    if isinstance(student, str) and student.startswith(STUDENT_LAYERS_PREFIX):
        text = student[len(STUDENT_LAYERS_PREFIX):]
        try:
            layers = [int(part) for part in text.split(",")]
        except ValueError:
            raise ValueError(f"{student!r}: give the teacher's layers as numbers, e.g. "
                             f"'{STUDENT_LAYERS_PREFIX}0,2,4'.") from None
        return teacher.encoder.truncated(layers)
    keras.utils.set_random_seed(seed)  # a preset's initial weights
    try:
        encoder, _ = resolve_encoder(student, vocabulary_size=teacher.encoder.vocabulary_size, role="student")
    except UnknownEncoderError as error:
        raise UnknownEncoderError(f"{error} Or '{STUDENT_LAYERS_PREFIX}0,2,4', a copy of the teacher's "
                                  "layers 0, 2 and 4.") from None
    return encoder


def read_text_lines(files):
    """The non-blank lines of text files, stripped."""
    texts = []
    for path in files:
        with open(path, encoding="utf-8") as file:
            texts.extend(line.strip() for line in file if line.strip())
    if not texts:
        raise ValueError(f"No text in {list(files)}.")
    return texts


def _transfer_set(all_x, size, max_examples, count, unlabeled, seed):
    """Texts (or text pairs) for the transfer set: training examples outside the labelled subset, and `unlabeled`."""
    # The examples `sample_examples(all_x, all_y, max_examples, seed)` did not choose.
    labelled = set(range(size)) if max_examples is None or max_examples >= size else set(
        np.random.default_rng(seed).permutation(size)[:max_examples].tolist()
    )
    rest = [i for i in range(size) if i not in labelled]
    chosen = sorted(np.random.default_rng(seed + 1).permutation(rest)[:count].tolist()) if count else []
    pairs = isinstance(all_x, tuple)
    transfer = tuple([part[i] for i in chosen] for part in all_x) if pairs else [all_x[i] for i in chosen]
    if unlabeled is not None:
        if pairs:
            raise SettingError("`unlabeled` reads one text per line: it cannot add text pairs; use "
                               "`transfer_examples` for a task of pairs.", ["unlabeled", "transfer_examples"])
        transfer += read_text_lines([unlabeled]) if isinstance(unlabeled, str) else list(unlabeled)
    return transfer


def _layerwise(teacher, student, texts, settings, log_dir, steps=None, epochs=1):
    from kbert.callbacks.tensorboard import TensorBoard
    from kbert.models.layerwise_distiller import LayerwiseDistiller

    distiller = LayerwiseDistiller(teacher, student)
    distiller.compile()
    callbacks = [TensorBoard(log_dir=log_dir, update_freq=50)]
    if steps:
        import tensorflow as tf

        data = tf.data.Dataset.from_tensor_slices(texts).shuffle(len(texts)).repeat()
        distiller.fit(data, batch_size=settings.batch_size, epochs=1, steps_per_epoch=steps,
                      callbacks=callbacks, verbose=settings.verbose)
    else:
        distiller.fit(texts, batch_size=settings.batch_size, epochs=epochs, callbacks=callbacks,
                      verbose=settings.verbose)
    return distiller.student


def classes_of_the_model(task, model):
    """A run on files takes the classes (or tags) of the model it starts from, in its order; a named task as it is."""
    from kbert.runs.own_data import FileData

    names = getattr(model, "class_names", None) or getattr(model, "labels", None)
    if not isinstance(task, FileData) or names is None or task.class_names is None:
        return task
    return task.with_class_names(names)


def _data_settings(task):
    from kbert.runs.own_data import FileData

    return {"train_file": task.train.path} if isinstance(task, FileData) else {}


def _start_run(out):
    os.makedirs(out, exist_ok=True)
    clean_run_folder(out)  # what a killed run left (the commands have done so already)


def _write_run(out, model, task, settings, result):
    """Saves `model`, evaluates it, writes `result(metrics)` to `metrics.json`: into `out` together, or not at all."""
    written = {}

    def write(folder):
        model.save(os.path.join(folder, "model.keras"))
        metrics = evaluate_task(model, task, max_examples=settings.max_eval_examples, batch_size=settings.batch_size)
        written.update(result(metrics))
        if hasattr(task, "record"):  # a run on files: what it was trained and scored on
            written["data"] = task.record()
        write_text(os.path.join(folder, "metrics.json"), json_text(written))

    write_run(out, write)
    return written
