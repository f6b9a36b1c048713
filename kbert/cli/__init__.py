"""The `kbert` command line: a module per family of commands, and `main`.

- `arguments`: how a command is declared, the flags several commands share,
  number parsers, the help format;
- `getting_started`: `demo`, `presets`;
- `pretraining`: `vocabulary`, `prepare-pretraining`, `pretrain`, `fill-mask`;
- `tasks`: `train`, `evaluate`;
- `compression`: `distill`, `prune`;
- `serving`: `export`, `predict`;
- `main`: the parser of them all, and `main`, which checks a command's files,
  sets its backend and turns a user's error into one line around its run.

A new command goes into its family's `add_commands` with `add_command`.
"""

from kbert.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
