"""The settings every run of a task model shares."""

import dataclasses

from kbert.io.setting_error import SettingError
from kbert.io.settings_objects import settings_from_arguments


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every run of a task model takes; `FineTuningSettings`, `DistillationSettings` and `PruningSettings` add theirs.

    A field is also the `kbert` command's flag of its name (`batch_size` is
    `--batch-size`): a setting has one name from the command line to the
    run. Values are checked when the settings are made.

    Args:
        batch_size: examples per step.
        learning_rate: the peak learning rate; None for the model's default.
        max_examples: train on a seeded random subset of this many examples;
            None for all.
        max_eval_examples: validate and score on a seeded subset of this
            many; None for all.
        seed: fixes the subsets, their order and the initial weights.
        verbose: Keras' verbosity of `fit`.

    Example:
    >>> settings = RunSettings(batch_size=16)
    >>> dataclasses.replace(settings, seed=3).seed, settings.batch_size
    (3, 16)
    >>> RunSettings(batch_size=0)
    Traceback (most recent call last):
    ...
    kbert.io.setting_error.SettingError: `batch_size` must be a positive integer, got 0.
    """

    batch_size: int = 32
    learning_rate: float | None = None
    max_examples: int | None = None
    max_eval_examples: int | None = None
    seed: int = 0
    verbose: int = 1

    def __post_init__(self):
        self._check_count("batch_size")
        for name in ("max_examples", "max_eval_examples"):
            if getattr(self, name) is not None:
                self._check_count(name)
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise SettingError(f"`learning_rate` must be positive, got {self.learning_rate!r}.", ["learning_rate"])

    def _check_count(self, name, least=1):
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "a positive integer" if least == 1 else f"an integer of at least {least}"
            raise SettingError(f"`{name}` must be {kind}, got {value!r}.", [name])

    @classmethod
    def from_arguments(cls, settings=None, **options):
        """`settings`, or the settings that the keyword `options` make; an option may repeat a setting, not change it."""
        return settings_from_arguments(cls, settings, options, f"{cls.__name__}()")

    @classmethod
    def from_flags(cls, namespace, **values):
        """The settings a `kbert` command's parsed flags give (a flag is the setting of its name); `values` set the rest."""
        found = {field.name: getattr(namespace, field.name) for field in dataclasses.fields(cls)
                 if hasattr(namespace, field.name)}
        return cls(**{**found, **values})
