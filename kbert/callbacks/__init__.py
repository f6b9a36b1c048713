"""Callbacks for long `fit` runs: learning rate logs, TensorBoard, checkpoints, backups.

`standard(logdir)` gives the set a pretraining or fine-tuning run wants; the
classes can also be used one by one. More pictures for TensorBoard:
`ConfusionMatrixLogger` (a classifier's confusion matrix and per-class
scores), `HParamsLogger` (hyper-parameters and final metrics),
`AttentionMapLogger` (attention heat maps of a sentence), `FillMaskLogger`
(a pretrainer's guesses for masked sentences) and `write_projector`
(sentence vectors for the embedding projector). `TrainingStepCallback` is
their base for work at every batch: it knows the step and the learning rate
without reading the model between two steps.
"""

import os

from kbert.callbacks.attention_map_logger import AttentionMapLogger, attention_scores
from kbert.callbacks.backup_and_restore import BackupAndRestore
from kbert.callbacks.confusion_matrix_logger import ConfusionMatrixLogger
from kbert.callbacks.fill_mask_logger import FillMaskLogger
from kbert.callbacks.hparams_logger import HParamsLogger
from kbert.callbacks.learning_rate_logger import LearningRateLogger
from kbert.callbacks.model_checkpoint import ModelCheckpoint
from kbert.callbacks.projector import write_projector
from kbert.callbacks.tensorboard import TensorBoard
from kbert.callbacks.training_step import TrainingStepCallback


def standard(logdir, save_freq=500, checkpoint="epoch", keep=3, profile_batch=0, update_freq=50):
    """The callbacks of a resumable, observable `fit`, all writing under `logdir`.

    In the order Keras calls them:

    1. `BackupAndRestore` in `<logdir>/backup`, every `save_freq` batches and
       at epoch ends: a `fit` that was interrupted continues from the last
       backup when run again with the same `logdir`.
    2. `LearningRateLogger`: adds `learning_rate` to the logs, so the
       callbacks after it (TensorBoard, History, the progress bar) show it.
    3. `TensorBoard` in `<logdir>/tensorboard`: losses, metrics and the
       learning rate per epoch (`epoch/...`) and every `update_freq` batches
       (`steps/...`), numbered by optimizer step.
    4. `ModelCheckpoint` to `<logdir>/checkpoints/epoch-001.keras`, ... (whole
       models, for `keras.saving.load_model`), keeping the newest `keep`.

    Args:
        logdir: the run's directory (a local path).
        save_freq: batches between backups, or `"epoch"`.
        checkpoint: `"epoch"` to save the model at each epoch end, a number
            of batches (files `epoch-001-batch-000500.keras`, ...), or `None`
            for no checkpoints.
        keep: how many checkpoints to keep.
        profile_batch: TensorBoard's profiler: a batch or a `(start, stop)`
            range of batches to profile, numbered by optimizer step; 0 for
            none.
        update_freq: batches between TensorBoard's batch summaries, or
            `"epoch"` for epoch summaries only.

    Returns:
        A list of callbacks for `fit(callbacks=...)`.

    Example:
    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", loss="mse")
    >>> logdir = tempfile.mkdtemp()
    >>> history = model.fit(np.zeros((8, 3)), np.zeros(8), epochs=2, verbose=0,
    ...                     callbacks=kbert.callbacks.standard(logdir))
    >>> sorted(os.listdir(logdir)), sorted(os.listdir(os.path.join(logdir, "checkpoints")))
    (['checkpoints', 'tensorboard'], ['epoch-001.keras', 'epoch-002.keras'])
    """
    logdir = os.fspath(logdir)
    callbacks = [
        BackupAndRestore(os.path.join(logdir, "backup"), save_freq=save_freq),
        LearningRateLogger(),
        TensorBoard(
            log_dir=os.path.join(logdir, "tensorboard"),
            update_freq=update_freq,
            profile_batch=profile_batch,
        ),
    ]
    if checkpoint:
        name = "epoch-{epoch:03d}.keras"
        if checkpoint != "epoch":
            name = "epoch-{epoch:03d}-batch-{batch:06d}.keras"
        path = os.path.join(logdir, "checkpoints", name)
        callbacks.append(ModelCheckpoint(path, keep=keep, save_freq=checkpoint))
    return callbacks


__all__ = [
    "AttentionMapLogger",
    "BackupAndRestore",
    "ConfusionMatrixLogger",
    "FillMaskLogger",
    "HParamsLogger",
    "LearningRateLogger",
    "ModelCheckpoint",
    "TensorBoard",
    "TrainingStepCallback",
    "attention_scores",
    "standard",
    "write_projector",
]
