"""How `kbert.runs.compression.prune_task` prunes: the settings of a pruning run, one object."""

import dataclasses

from kbert.io.setting_error import SettingError
from kbert.runs.run_settings import RunSettings

# How the weight sparsity is held: for each Transformer kernel, or over all of them.
SCOPES = ("layer", "global")


@dataclasses.dataclass(frozen=True)
class PruningSettings(RunSettings):
    """The settings of a pruning run (`kbert prune`): the shared ones (`RunSettings`) and these.

    Attention heads go first (`heads`), then weights (`sparsity`) during
    the `epochs` of training further.

    Args:
        sparsity: the share of each Transformer kernel's weights set to zero
            by magnitude, on Zhu and Gupta's schedule
            (`kbert.MagnitudePruning`).
        heads: the share of all attention heads removed, least important
            first by Michel et al.'s measure.
        scope: "layer" (the sparsity holds for each kernel) or "global"
            (over all of them).
        rewind: lottery-ticket rewinding: the kept weights go back to their
            values before this training, then train again with the mask.
        epochs: epochs of training while pruning.
        learning_rate: the peak learning rate (default 2e-5).
        importance_examples: training examples that measure the heads'
            importance.

    Example:
    >>> PruningSettings(heads=0.25).learning_rate
    2e-05
    >>> PruningSettings()
    Traceback (most recent call last):
    ...
    kbert.io.setting_error.SettingError: Nothing to prune: give a weight `sparsity`, a share of `heads`, or both.
    """

    learning_rate: float | None = 2e-5
    sparsity: float = 0.0
    heads: float = 0.0
    scope: str = "layer"
    rewind: bool = False
    epochs: int = 1
    importance_examples: int = 2000

    def __post_init__(self):
        super().__post_init__()
        self._check_count("epochs")
        self._check_count("importance_examples")
        for name in ("sparsity", "heads"):
            if not 0 <= getattr(self, name) < 1:
                raise SettingError(f"`{name}` is a share, in [0, 1); got {getattr(self, name)!r}.", [name])
        if not self.sparsity and not self.heads:
            raise SettingError("Nothing to prune: give a weight `sparsity`, a share of `heads`, or both.",
                               ["sparsity", "heads"])
        if self.scope not in SCOPES:
            raise SettingError(f"`scope` must be one of {SCOPES}, got {self.scope!r}.", ["scope"])
