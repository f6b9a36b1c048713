"""`kbert demo` and `kbert presets`: the first commands a user runs."""

from kbert.cli.arguments import (
    add_backend_argument,
    add_command,
    add_quiet_argument,
    non_negative_int,
    positive_float,
    positive_int,
    verbosity,
)


def add_commands(commands):
    demo = add_command(commands, "demo", "train and evaluate a spam filter on SMS Spam, then pretrain briefly "
                                         "(offline)", _demo, check=_check_demo)
    demo.add_argument("--preset", default="tiny", help="encoder size (see `kbert presets`)")
    demo.add_argument("--epochs", type=positive_int, default=3, help="fine-tuning epochs")
    demo.add_argument("--sequence-length", type=positive_int, default=64, help="tokens per text")
    demo.add_argument("--learning-rate", type=positive_float, default=1e-3, help="peak fine-tuning rate")
    demo.add_argument("--pretraining-steps", type=non_negative_int, default=150,
                      help="steps of the closing pretraining example (0 skips it)")
    demo.add_argument("--export-dir", default="saved_models",
                      help="export the spam model to EXPORT_DIR/spam/<version> ('' skips the export)")
    add_quiet_argument(demo)
    add_backend_argument(demo)

    presets = add_command(commands, "presets", "list encoder sizes and parameter counts", _presets)
    presets.add_argument("--vocabulary-size", type=positive_int, default=30522,
                         help="the vocabulary the counts assume")


def _demo(args):
    from kbert.runs import demo

    demo.run(preset=args.preset, epochs=args.epochs, sequence_length=args.sequence_length,
             learning_rate=args.learning_rate, pretraining_steps=args.pretraining_steps,
             export_dir=args.export_dir, verbose=verbosity(args))


def _check_demo(args):
    from kbert.runs.outputs import check_output_folder

    if args.export_dir:
        check_output_folder(args.export_dir, "--export-dir")


def _presets(args):
    from kbert.models.presets import PRESETS, parameter_count

    print(f"{'preset':<15} {'L':>3} {'H':>5} {'A':>3} {'I':>6} {'E':>5} {'shared':>6} {'parameters':>12}  "
          f"(vocabulary {args.vocabulary_size})")
    for name, p in PRESETS.items():
        count = parameter_count(name, args.vocabulary_size)
        shared = "yes" if p.get("num_groups", p["num_layers"]) < p["num_layers"] else "no"
        print(f"{name:<15} {p['num_layers']:>3} {p['hidden_dim']:>5} {p['num_heads']:>3} "
              f"{p['intermediate_dim']:>6} {p.get('embedding_size', p['hidden_dim']):>5} {shared:>6} "
              f"{count:>12,}")
