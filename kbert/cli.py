"""The `kbert` command line."""

import argparse
import os
import sys


def _demo(args):
    from kbert import demo

    demo.run(preset=args.preset, epochs=args.epochs, sequence_length=args.sequence_length,
             learning_rate=args.learning_rate, verbose=2 if args.quiet else 1)


def _vocabulary(args):
    import kbert

    vocabulary = kbert.learn_vocabulary(files=args.files, vocabulary_size=args.size,
                                        lowercase=not args.cased)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary) + "\n")
    os.replace(tmp, args.out)  # never leave a half-written vocabulary
    print(f"Wrote {len(vocabulary)} tokens to {args.out}")


def _presets(args):
    from kbert.presets import PRESETS, parameter_count

    print(f"{'preset':<8} {'L':>3} {'H':>5} {'A':>3} {'I':>5} {'parameters':>12}  "
          f"(vocabulary {args.vocabulary_size})")
    for name, p in PRESETS.items():
        count = parameter_count(name, args.vocabulary_size)
        print(f"{name:<8} {p['num_layers']:>3} {p['hidden_dim']:>5} {p['num_heads']:>3} "
              f"{p['intermediate_dim']:>5} {count:>12,}")


def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT for Keras: train, evaluate, serve.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="train and evaluate a spam filter on SMS Spam (offline)")
    demo.add_argument("--preset", default="tiny")
    demo.add_argument("--epochs", type=int, default=3)
    demo.add_argument("--sequence-length", type=int, default=64)
    demo.add_argument("--learning-rate", type=float, default=1e-3)
    demo.add_argument("--quiet", action="store_true", help="one line per epoch")
    demo.set_defaults(run=_demo)

    vocabulary = commands.add_parser("vocabulary", help="learn a WordPiece vocabulary from text files")
    vocabulary.add_argument("files", nargs="+", help="text files or glob patterns, one text per line")
    vocabulary.add_argument("--size", type=int, default=30522)
    vocabulary.add_argument("--cased", action="store_true", help="keep case and accents")
    vocabulary.add_argument("--out", default="vocab.txt")
    vocabulary.set_defaults(run=_vocabulary)

    presets = commands.add_parser("presets", help="list encoder sizes and parameter counts")
    presets.add_argument("--vocabulary-size", type=int, default=30522)
    presets.set_defaults(run=_presets)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"kbert {args.command}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
