"""Keras' progress bar where it can be drawn, a plain line where it cannot."""

import sys

import keras


def progress_bar(target, **kwargs):
    """A `keras.utils.Progbar` that draws only on a terminal or in a notebook.

    Keras draws its bar with escape codes and carriage returns, which fill a
    log file or a pipe with control characters; there the bar prints one
    plain line when it completes instead. Takes Progbar's arguments.

    Example:
    >>> bar = progress_bar(3, unit_name="text")
    >>> bar.target
    3
    """
    interactive = sys.stdout.isatty() or "ipykernel" in sys.modules
    return keras.utils.Progbar(target, verbose=1 if interactive else 2, **kwargs)
