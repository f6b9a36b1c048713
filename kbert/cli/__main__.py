"""`python -m kbert.cli`: the `kbert` command."""

import sys

from kbert.cli.main import main

if __name__ == "__main__":  # not when a tool imports every module of the package
    sys.exit(main())
