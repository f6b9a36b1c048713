"""How `kbert.runs.pretraining.pretrain` pretrains: the settings of a pretraining run, one object."""

import dataclasses

from kbert.io.setting_error import SettingError
from kbert.pretraining.documents import DOCUMENT_BOUNDARIES
from kbert.pretraining.sentence_pair_builder import OBJECTIVES
from kbert.runs.run_settings import RunSettings


@dataclasses.dataclass(frozen=True)
class PretrainingRunSettings(RunSettings):
    """The settings of a pretraining run (`kbert pretrain`): the shared ones (`RunSettings`) and these.

    The corpus and the run folder are `pretrain`'s own arguments; the
    examples' options are those of `kbert.PretrainingSettings`, which the
    run makes from these.

    Args:
        preset: the encoder's size, BERT or ALBERT (see `kbert.PRESETS`).
        embedding_size, num_groups, attention_dropout: overrides of the
            preset's (None keeps them).
        vocabulary: a vocab.txt; None learns one of `vocabulary_size` tokens
            from the corpus (or takes a prepared folder's).
        cased: keep case and accents.
        sequence_length: tokens per example; None for 128, or a prepared
            folder's.
        gradient_accumulation_steps: update every N steps with the mean
            gradient; None for every step.
        epochs, steps_per_epoch: the run's length; `steps_per_epoch=None` is
            one pass over the corpus.
        mask_rate, whole_word_masking, max_ngram: the masked-LM masking.
        objective: "nsp", "sop" or "none"; None for "nsp", or a prepared
            folder's.
        document_boundary: "file" or "blank_line".
        backup_every: steps between backups (a killed run resumes from the last).

    Example:
    >>> settings = PretrainingRunSettings(preset="tiny", objective="sop")
    >>> settings.batch_size, settings.mask_rate
    (32, 0.15)
    >>> PretrainingRunSettings(objective="mlm")
    Traceback (most recent call last):
    ...
    kbert.io.setting_error.SettingError: `objective` must be one of ('nsp', 'sop', 'none'), got 'mlm'.
    """

    preset: str = "mini"
    embedding_size: int | None = None
    num_groups: int | None = None
    attention_dropout: float | None = None
    vocabulary: str | None = None
    vocabulary_size: int = 30522
    cased: bool = False
    sequence_length: int | None = None
    gradient_accumulation_steps: int | None = None
    epochs: int = 1
    steps_per_epoch: int | None = None
    mask_rate: float = 0.15
    objective: str | None = None
    whole_word_masking: bool = False
    max_ngram: int = 1
    document_boundary: str = "file"
    backup_every: int = 500

    def __post_init__(self):
        super().__post_init__()
        for name in ("epochs", "vocabulary_size", "max_ngram", "backup_every"):
            self._check_count(name)
        for name in ("embedding_size", "num_groups", "sequence_length", "gradient_accumulation_steps",
                     "steps_per_epoch"):
            if getattr(self, name) is not None:
                self._check_count(name)
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise SettingError(f"`objective` must be one of {OBJECTIVES}, got {self.objective!r}.", ["objective"])
        if self.document_boundary not in DOCUMENT_BOUNDARIES:
            raise SettingError(f"`document_boundary` must be one of {DOCUMENT_BOUNDARIES}, got "
                               f"{self.document_boundary!r}.", ["document_boundary"])
        if not 0 < self.mask_rate < 1:
            raise SettingError(f"`mask_rate` must be in (0, 1), got {self.mask_rate!r}.", ["mask_rate"])
