"""What the `kbert` commands share: how a command is declared, the flags several take, number parsers, the help format.

A command is declared once, with everything `kbert.cli.main` needs to know
of it (`add_command`): its run, the checks of its files before any work,
the folders it writes into, and what Ctrl-C leaves behind.
"""

import argparse
import math
import os
import sys

BACKENDS = ("tensorflow", "jax", "torch")
QUIET_HELP = "one line per epoch instead of a progress bar"
RUN_OVERWRITE_HELP = ("replace the run in --out (its model.keras and metrics.json; its TensorBoard logs "
                      "are moved to --out/earlier-runs/)")
OBJECTIVE_HELP = ("the sentence-pair objective: next-sentence prediction (BERT), sentence-order "
                  "prediction (ALBERT), or none (masked LM only)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, where it has one worth showing."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or default == argparse.SUPPRESS:
            return action.help
        if "default" in (action.help or ""):  # the help says it in its own words
            return action.help
        return super()._get_help_string(action)


def add_command(commands, name, description, run, check=None, output_folders=None, interrupted=".",
                backend=None, lock=None):
    """Adds a command to `commands` (argparse's subparsers); returns its parser, for its arguments.

    Args:
        run: `run(args)`, the command's work.
        check: `check(args)`, its files and folders checked before any work
            and before any folder is made (`kbert.runs.outputs`).
        output_folders: `output_folders(args)`, the folders it writes into
            (made when missing, removed again if it fails before writing);
            default: `--out`, where it has one.
        interrupted: what Ctrl-C prints after "interrupted" (how to go on).
        backend: the Keras backend it always runs on, whatever `--backend`
            or the environment names.
        lock: `lock(args)`, the output it is the one writer of while it
            runs (`kbert.io.writer_lock`): `(path, beside)`, or None for
            none; `run_folder_lock` for a run folder, `replaced_output_lock` for an
            output replaced as a whole (the lock file lies beside it).
    """
    sub = commands.add_parser(name, help=description, description=description[0].upper() + description[1:] + ".",
                              formatter_class=HelpFormatter)
    sub.set_defaults(run=run, check=check, output_folders=output_folders, interrupted=interrupted,
                     forced_backend=backend, lock=lock)
    return sub


def run_folder_lock(args):
    """The lock of a command's run folder `--out`, inside it (`kbert.io.writer_lock`)."""
    return args.out, False


def replaced_output_lock(args):
    """The lock of an `--out` replaced as a whole (a file, or a folder renamed into place), beside it; none without `--out`."""
    return (args.out, True) if args.out else None


def add_backend_argument(command):
    command.add_argument("--backend", choices=BACKENDS, default=None,
                         help="the Keras backend to run on (default: KERAS_BACKEND, else "
                              "keras.json's, else tensorflow); the model file is the same on every backend")


def add_attention_dropout_argument(command):
    command.add_argument("--attention-dropout", type=fraction_below_one, default=None,
                         help="dropout of the attention probabilities (default: the encoder's, 0.1 for "
                              "presets); 0 trains through the fused attention kernel of a GPU")


def add_strategy_arguments(command):
    from kbert.backend.distribute import DEFAULT_CONNECT_TIMEOUT, STRATEGIES

    command.add_argument("--strategy", choices=STRATEGIES, default=None,
                         help="where to train: default (one device), mirrored (this machine's "
                              "GPUs), multi-worker (the workers of TF_CONFIG), tpu (TPUStrategy; "
                              "default: multi-worker when TF_CONFIG is set, else default); on "
                              "--backend jax, mirrored and tpu split each batch over this "
                              "machine's devices (keras.distribution.DataParallel)")
    command.add_argument("--connect-timeout", type=positive_float, default=DEFAULT_CONNECT_TIMEOUT,
                         help="seconds a multi-worker run waits for the other workers to start")


def add_quiet_argument(command):
    command.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def add_run_folder_arguments(command):
    """`--out` and `--overwrite` of a command that writes a run folder (`train`, `distill`, `prune`)."""
    command.add_argument("--out", required=True, help="run folder: model.keras, metrics.json, tensorboard/")
    command.add_argument("--overwrite", action="store_true", help=RUN_OVERWRITE_HELP)


def take_setting_defaults(command, kind):
    """Gives `command` the defaults of the settings object `kind` (a dataclass), the one place a run's defaults are written.

    Its flags are the settings of their names (`--batch-size` is
    `batch_size`), so the flags declare no defaults of their own; fields
    without a flag are left to `kind.from_flags`, which takes them as well.
    """
    import dataclasses

    command.set_defaults(**{field.name: field.default for field in dataclasses.fields(kind)})


def add_subset_and_seed_arguments(command, max_examples_help, seed_help):
    """`--max-examples`, `--max-eval-examples` and `--seed` of a command that trains and evaluates a run."""
    command.add_argument("--max-examples", type=positive_int, default=None, help=max_examples_help)
    command.add_argument("--max-eval-examples", type=positive_int, default=None,
                         help="evaluate on the first this many examples of the evaluation split")
    command.add_argument("--seed", type=int, help=seed_help)


def folder_of_the_out_file(args):
    """The folder of an `--out` that names a file: the folder such a command may make."""
    return [os.path.dirname(os.path.abspath(args.out))]


def verbosity(args):
    """Keras' `verbose` for a command's `fit`: a progress bar on a terminal, else one plain line per epoch.

    Keras draws its bar with escape codes and carriage returns, which fill
    a log file or a pipe with control characters.
    """
    return 1 if sys.stdout.isatty() and not args.quiet else 2


def _number(text, accept, wanted):
    # argparse names the flag in its error: "argument --learning-rate: ..."
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def positive_float(text):
    return _number(text, lambda value: value > 0, "a finite number above 0")


def open_fraction(text):
    return _number(text, lambda value: 0 < value < 1, "a number between 0 and 1 (both excluded)")


def fraction_below_one(text):
    return _number(text, lambda value: 0 <= value < 1, "a number from 0 up to, not including, 1")


def closed_fraction(text):
    return _number(text, lambda value: 0 <= value <= 1, "a number from 0 to 1")


def _integer(text, least):
    # argparse names the flag in its error: "argument --batch-size: ..."
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"must be an integer of at least {least}, got {text!r}")
    return value


def positive_int(text):
    return _integer(text, 1)


def non_negative_int(text):
    return _integer(text, 0)


def add_data_file_arguments(command, splits):
    """The flags of a command that reads the user's own labelled files: the files, their columns, the classes.

    `splits` maps each file flag to its help (`{"--train": "..."}`).
    """
    group = command.add_argument_group(
        "your own data", "labelled texts as CSV with a header (RFC 4180 quoting), TSV (no quote processing; "
                         "with a header, or text<TAB>label) or JSON Lines; tagged words as CoNLL column files; "
                         "questions as SQuAD-format JSON (v1.1, or v2.0 with impossible answers)")
    for flag, help_text in splits.items():
        group.add_argument(flag, metavar="FILE", help=help_text)
    group.add_argument("--text-column", help="the column of the texts (default: text, sentence, sentence1, ...)")
    group.add_argument("--text-pair-column",
                       help="the column of the second texts of pairs (default: text_pair, sentence2, ...)")
    group.add_argument("--label-column", help="the column of the labels (default: label, class, ...)")
    group.add_argument("--id-column", help="a column of example ids (default: id, idx, ...)")
    return group


def data_file_columns(args):
    """The column flags as `kbert.data.read_labelled_file`'s keyword arguments."""
    return {"text_column": args.text_column, "text_pair_column": args.text_pair_column,
            "label_column": args.label_column, "id_column": args.id_column}


# The projections that take LoRA adapters (`kbert.models.lora_adapters.LORA_TARGETS`),
# named here so that `kbert --help` needs no Keras.
LORA_TARGET_NAMES = ("query", "key", "value", "attention_output", "intermediate", "output")


def add_lora_arguments(command):
    command.add_argument("--lora-rank", type=positive_int,
                         help="fine-tune LoRA adapters of this rank (8 is usual) instead of the whole encoder: "
                              "faster steps, far less memory; the default learning rate is then 75x")
    command.add_argument("--lora-targets", type=lora_target_list,
                         help=f"with --lora-rank: the projections with adapters, comma-separated, of "
                              f"{','.join(LORA_TARGET_NAMES)}, or all (default: query,value; all learns "
                              "more from small data sets)")
    command.add_argument("--lora-alpha", type=positive_float,
                         help="with --lora-rank: the adapters' update is scaled by alpha / rank (default: "
                              "alpha = rank)")


def lora_target_list(text):
    """`--lora-targets query,value`: projections of `LORA_TARGET_NAMES`, each once; or `all` of them."""
    if text.strip() == "all":
        return LORA_TARGET_NAMES
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in LORA_TARGET_NAMES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct projections of "
                                         f"{','.join(LORA_TARGET_NAMES)}, separated by commas")
    return tuple(names)


def class_name_list(text):
    """`--labels a,b,c`: the class names in id order, each once."""
    names = [name.strip() for name in text.split(",")]
    if len(names) < 2 or "" in names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of two or more distinct class names, "
                                         "separated by commas")
    return names


def said_as_flags(text):
    """`text` with each run setting written in backticks said as the command's flag (`epochs`: --epochs)."""
    import dataclasses

    from kbert.io.setting_error import said_as_flags as say
    from kbert.runs.distillation_settings import DistillationSettings
    from kbert.runs.fine_tuning_settings import FineTuningSettings
    from kbert.runs.pretraining_run_settings import PretrainingRunSettings
    from kbert.runs.pruning_settings import PruningSettings

    kinds = (DistillationSettings, FineTuningSettings, PretrainingRunSettings, PruningSettings)
    return say(text, {field.name for kind in kinds for field in dataclasses.fields(kind)})
