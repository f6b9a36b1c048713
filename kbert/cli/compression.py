"""`kbert distill` and `kbert prune`: smaller models from a fine-tuned one."""

from kbert.cli.arguments import (
    add_backend_argument,
    add_data_file_arguments,
    add_command,
    add_quiet_argument,
    add_run_folder_arguments,
    add_subset_and_seed_arguments,
    closed_fraction,
    fraction_below_one,
    non_negative_int,
    open_fraction,
    positive_float,
    positive_int,
    run_folder_lock,
    take_setting_defaults,
    verbosity,
)
from kbert.cli.tasks import (
    add_conll_arguments,
    check_task_or_files,
    print_metrics,
    print_saved,
    start_run_folder,
    task_or_files,
)


def add_commands(commands):
    from kbert.runs.distillation_settings import DistillationSettings
    from kbert.runs.pruning_settings import PruningSettings
    from kbert.runs.recipes import RECIPES

    classification = sorted(name for name, info in RECIPES.items() if info.builder == "classifier")
    distill = add_command(commands, "distill", "distil a fine-tuned classifier into a smaller student, evaluate, "
                                               "save", _distill, check=_check_distill, lock=run_folder_lock)
    take_setting_defaults(distill, DistillationSettings)
    distill.add_argument("task", nargs="?", choices=classification,
                         help="the named data set the teacher was trained on; or your files with --train")
    add_data_file_arguments(distill, {
        "--train": "distil on this labelled file (as kbert train reads it; the teacher's classes)",
        "--validation": "validate on this file (default: a stratified --validation-split of --train)",
        "--test": "score the student on this file (default: on the validation data)"})
    distill.add_argument("--validation-split", type=open_fraction, default=0.1,
                         help="without --validation: the part of each class of --train to validate on")
    distill.add_argument("--teacher", required=True, help="the teacher's model.keras (of `kbert train`)")
    distill.add_argument("--student",
                         help="a preset (tiny, mini, small, ...), 'layers:0,2,4' for a copy of the "
                              "teacher's layers 0, 2 and 4, or a .keras file holding an encoder")
    add_run_folder_arguments(distill)
    distill.add_argument("--unlabeled", help="a text file, one text per line, that the teacher labels "
                                             "for the student (a transfer set)")
    distill.add_argument("--transfer-examples", type=non_negative_int,
                         help="add this many training examples outside --max-examples to the "
                              "transfer set, without their labels")
    distill.add_argument("--general-corpus", action="append",
                         help="raw text files or glob patterns (repeatable) for general distillation")
    distill.add_argument("--general-steps", type=non_negative_int,
                         help="steps of general (layer-wise) distillation on --general-corpus first")
    distill.add_argument("--layerwise-epochs", type=non_negative_int,
                         help="epochs of layer-wise distillation on the task's texts before task "
                              "distillation (TinyBERT)")
    distill.add_argument("--temperature", type=positive_float, help="softmax temperature T")
    distill.add_argument("--alpha", type=closed_fraction,
                         help="weight of the distillation term; 1 - alpha weighs the labels")
    distill.add_argument("--epochs", type=positive_int, help="epochs of task distillation")
    distill.add_argument("--batch-size", type=positive_int, help="examples per step")
    distill.add_argument("--learning-rate", type=positive_float,
                         help="peak learning rate (default: by the student's width)")
    add_subset_and_seed_arguments(distill, "labelled training examples: a seeded random subset of this many",
                                  "fixes the subsets, order and weights")
    add_conll_arguments(distill)
    add_quiet_argument(distill)
    add_backend_argument(distill)

    prune = add_command(commands, "prune", "prune a fine-tuned model (weights, attention heads) while it "
                                           "trains further, evaluate, save", _prune, check=_check_prune,
                        lock=run_folder_lock)
    take_setting_defaults(prune, PruningSettings)
    prune.add_argument("model", help="a task model's .keras file (e.g. the model.keras of `kbert train`)")
    prune.add_argument("--task", choices=sorted(RECIPES),
                       help="the named data set the model was trained on; or your files with --train")
    add_data_file_arguments(prune, {
        "--train": "train on this file while pruning (as kbert train reads it; the model's classes or tags)",
        "--validation": "validate on this file (default: a seeded --validation-split of --train)",
        "--test": "score the pruned model on this file (default: on the validation data)"})
    prune.add_argument("--validation-split", type=open_fraction, default=0.1,
                       help="without --validation: the part of --train to validate on")
    add_conll_arguments(prune)
    add_run_folder_arguments(prune)
    prune.add_argument("--sparsity", type=fraction_below_one,
                       help="share of the Transformer kernels' weights set to zero, by magnitude")
    prune.add_argument("--heads", type=fraction_below_one,
                       help="share of attention heads removed, least important first")
    prune.add_argument("--scope", choices=("layer", "global"),
                       help="the sparsity holds for each kernel, or over all of them")
    prune.add_argument("--rewind", action="store_true",
                       help="lottery-ticket rewinding: the kept weights go back to their values "
                            "before this training, then train again with the mask")
    prune.add_argument("--epochs", type=positive_int, help="epochs of training while pruning")
    prune.add_argument("--batch-size", type=positive_int, help="examples per step")
    prune.add_argument("--learning-rate", type=positive_float, help="peak learning rate")
    add_subset_and_seed_arguments(prune, "train on a seeded random subset of this many training examples",
                                  "fixes the subset, order and weights")
    add_quiet_argument(prune)
    add_backend_argument(prune)


def _check_distill(args):
    from kbert.runs.outputs import RUN_FILES, check_input_file, check_own_files

    check_own_files(args.out, RUN_FILES, "--out")

    check_task_or_files(args, "kbert distill sst2")
    check_input_file(args.teacher, "--teacher")
    if args.unlabeled:
        check_input_file(args.unlabeled, "--unlabeled")
    if args.student.endswith(".keras"):
        check_input_file(args.student, "--student")


def _check_prune(args):
    from kbert.runs.outputs import RUN_FILES, check_input_file, check_own_files

    check_own_files(args.out, RUN_FILES, "--out")

    check_task_or_files(args, "--task sst2")
    check_input_file(args.model, "MODEL")


def _distill(args):
    from kbert.runs.compression import distill_task
    from kbert.runs.distillation_settings import DistillationSettings

    settings = DistillationSettings.from_flags(args, verbose=verbosity(args))  # checked before the folder
    start_run_folder(args, args.teacher, args.student, args.unlabeled, *(args.general_corpus or ()))
    result = distill_task(task_or_files(args), args.teacher, args.out, settings)
    print_metrics(result)
    print(f"  parameters       {result['parameters']:,} (teacher {result['teacher_parameters']:,})")
    print_saved(args.out)


def _prune(args):
    from kbert.runs.compression import prune_task
    from kbert.runs.pruning_settings import PruningSettings

    settings = PruningSettings.from_flags(args, verbose=verbosity(args))  # checked before the folder
    start_run_folder(args, args.model)
    result = prune_task(task_or_files(args), args.model, args.out, settings)
    print_metrics(result)
    report = result["sparsity"]
    print(f"  parameters       {result['parameters']:,} (before {result['parameters_before']:,})")
    print(f"  weight sparsity  {report['sparsity']:.4f} of the Transformer kernels")
    print_saved(args.out)
