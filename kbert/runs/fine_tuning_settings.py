"""How `kbert.runs.fine_tuning.fine_tune` trains: the settings of a fine-tuning run, one object."""

import dataclasses

from kbert.data.tfds_source import SOURCES
from kbert.io.setting_error import SettingError
from kbert.runs.run_settings import RunSettings


@dataclasses.dataclass(frozen=True)
class FineTuningSettings(RunSettings):
    """The settings of a fine-tuning run (`kbert train`): the shared ones (`RunSettings`) and these.

    Args:
        encoder: a preset name (tiny ... large), a checkpoint folder or name,
            a `kbert pretrain` run folder, a `.keras` file, or a
            `kbert.Encoder`.
        vocabulary: tokens or a vocab.txt, for a preset or a `.keras`
            encoder; None for a preset: bert-base-uncased's.
        epochs: None for `default_epochs`: 3, or more on a small data set.
        sequence_length: None for the task's (64 for short texts, 128 for
            pairs and tagging, 384 for questions).
        source: where a named data set is read: "local" (its canonical
            files) or "tfds" (TensorFlow Datasets).
        attention_dropout: replaces the encoder's dropout rate of attention
            probabilities; None keeps it.
        cased: keep case and accents, for a cased vocabulary file.

    Example:
    >>> settings = FineTuningSettings(encoder="mini", epochs=2)
    >>> settings.encoder, settings.batch_size, settings.cased
    ('mini', 32, False)
    >>> FineTuningSettings(source="web")
    Traceback (most recent call last):
    ...
    kbert.io.setting_error.SettingError: `source` must be one of ('local', 'tfds'), got 'web'.
    """

    encoder: object = "tiny"
    vocabulary: object = None
    epochs: int | None = None
    sequence_length: int | None = None
    source: str = "local"
    attention_dropout: float | None = None
    cased: bool = False

    def __post_init__(self):
        super().__post_init__()
        for name in ("epochs", "sequence_length"):
            if getattr(self, name) is not None:
                self._check_count(name)
        if self.source not in SOURCES:
            raise SettingError(f"`source` must be one of {SOURCES}, got {self.source!r}.", ["source"])
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            raise SettingError(f"`attention_dropout` must be in [0, 1), got {self.attention_dropout!r}.",
                               ["attention_dropout"])
