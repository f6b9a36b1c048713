"""How `kbert.runs.compression.distill_task` distils: the settings of a distillation run, one object."""

import dataclasses

from kbert.io.setting_error import SettingError
from kbert.runs.run_settings import RunSettings


@dataclasses.dataclass(frozen=True)
class DistillationSettings(RunSettings):
    """The settings of a distillation run (`kbert distill`): the shared ones (`RunSettings`) and these.

    The stages, each optional but the last, are TinyBERT's: general
    distillation on raw text, layer-wise distillation on the task's texts,
    then task distillation on labelled examples and a transfer set.

    Args:
        student: a preset name (e.g. `"mini"`), `"layers:0,2,4"` for a copy
            of the teacher's layers 0, 2 and 4 (DistilBERT's
            initialisation), or any encoder that
            `kbert.checkpoints.resolve_encoder` takes.
        unlabeled: texts for the transfer set: a list, or a text file with
            one text per line.
        transfer_examples: training examples outside the labelled subset
            added to the transfer set without their labels.
        general_corpus: text files or glob patterns of raw text, for
            general distillation.
        general_steps: steps of general distillation on `general_corpus`.
        layerwise_epochs: epochs of layer-wise distillation on the task's texts.
        temperature, alpha: the task distillation's (see `kbert.Distiller`).
        epochs: epochs of task distillation.

    Example:
    >>> settings = DistillationSettings(student="layers:0,2", epochs=1)
    >>> settings.temperature, settings.batch_size
    (2.0, 32)
    >>> DistillationSettings(general_steps=10)
    Traceback (most recent call last):
    ...
    kbert.io.setting_error.SettingError: `general_steps` distils on raw text: give `general_corpus` files.
    """

    student: object = "mini"
    unlabeled: object = None
    transfer_examples: int = 0
    general_corpus: object = None
    general_steps: int = 0
    layerwise_epochs: int = 0
    temperature: float = 2.0
    alpha: float = 0.5
    epochs: int = 3

    def __post_init__(self):
        super().__post_init__()
        for name in ("transfer_examples", "general_steps", "layerwise_epochs"):
            self._check_count(name, least=0)
        self._check_count("epochs")
        if self.general_steps and not self.general_corpus:
            raise SettingError("`general_steps` distils on raw text: give `general_corpus` files.",
                               ["general_steps", "general_corpus"])
        if not self.temperature > 0:
            raise SettingError(f"`temperature` must be positive, got {self.temperature!r}.", ["temperature"])
        if not 0 <= self.alpha <= 1:
            raise SettingError(f"`alpha` must be in [0, 1], got {self.alpha!r}.", ["alpha"])
