"""The flags of the run commands, against the settings objects they make."""

import dataclasses

import pytest

from kbert.cli.main import build_parser
from kbert.runs.distillation_settings import DistillationSettings
from kbert.runs.fine_tuning_settings import FineTuningSettings
from kbert.runs.pretraining_run_settings import PretrainingRunSettings
from kbert.runs.pruning_settings import PruningSettings

# Each run command with the fewest arguments it parses, and its settings.
COMMANDS = [
    (["train", "--train", "a.csv", "--out", "run"], FineTuningSettings),
    (["distill", "--train", "a.csv", "--teacher", "t.keras", "--out", "run"], DistillationSettings),
    (["prune", "m.keras", "--train", "a.csv", "--out", "run", "--sparsity", "0.5"], PruningSettings),
    (["pretrain", "--corpus", "c.txt", "--out", "run"], PretrainingRunSettings),
]


@pytest.mark.parametrize("argv, kind", COMMANDS, ids=[argv[0] for argv, _ in COMMANDS])
def test_a_run_command_without_flags_runs_with_its_settings_defaults(argv, kind):
    args = build_parser().parse_args(argv)
    verbose = {field.name: field.default for field in dataclasses.fields(kind)}["verbose"]
    given = {"sparsity": 0.5} if kind is PruningSettings else {}  # a prune must prune something
    assert kind.from_flags(args, verbose=verbose) == kind(**given)
    # And a flag given is the setting of its name.
    args = build_parser().parse_args([*argv, "--batch-size", "7", "--seed", "3"])
    assert kind.from_flags(args, verbose=verbose) == kind(batch_size=7, seed=3, **given)
