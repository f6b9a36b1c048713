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
        lora_rank: fine-tune LoRA adapters of this rank instead of the whole
            encoder (`kbert.Encoder.enable_lora`); None trains it all.
        lora_targets: the projections with adapters (default query and
            value); with `lora_rank` only.
        lora_alpha: the adapters' scale is `lora_alpha / lora_rank`
            (default `lora_rank`); with `lora_rank` only.
        packing: pack several examples (question windows, choices) into
            each row of a batch (`kbert.data.task_dataset`).

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
    lora_rank: int | None = None
    lora_targets: tuple | None = None
    lora_alpha: float | None = None
    packing: bool = False

    def __post_init__(self):
        super().__post_init__()
        self._check_lora()
        for name in ("epochs", "sequence_length"):
            if getattr(self, name) is not None:
                self._check_count(name)
        if self.source not in SOURCES:
            raise SettingError(f"`source` must be one of {SOURCES}, got {self.source!r}.", ["source"])
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            raise SettingError(f"`attention_dropout` must be in [0, 1), got {self.attention_dropout!r}.",
                               ["attention_dropout"])

    def _check_lora(self):
        from kbert.models.lora_adapters import checked_lora_settings

        given = [name for name in ("lora_targets", "lora_alpha") if getattr(self, name) is not None]
        if self.lora_rank is None:
            if given:
                raise SettingError(f"`{given[0]}` sets LoRA adapters: give `lora_rank` too.", [given[0], "lora_rank"])
            return
        try:
            checked_lora_settings(self.lora_rank, self.lora_targets, self.lora_alpha)
        except ValueError as error:
            named = [name for name in ("lora_rank", "lora_targets", "lora_alpha") if f"`{name}`" in str(error)]
            raise SettingError(str(error), named or ["lora_rank"]) from None

    @property
    def lora(self):
        """The builders' LoRA arguments (`lora_rank`, ...) these settings give; empty without `lora_rank`."""
        if self.lora_rank is None:
            return {}
        return {name: getattr(self, name) for name in ("lora_rank", "lora_targets", "lora_alpha")
                if getattr(self, name) is not None}
