"""Runs the `>>>` examples of kbert's docstrings: one test per docstring.

Every module under `kbert/` is imported and searched with `doctest.DocTestFinder`
(objects a module only re-exports are found in their own module, once). An
example sees its module's globals, as under `python -m doctest`, and also
`kbert`, `np`, `tf`, `keras`, `os`, and `folder`: a fresh empty directory for
examples that write files. It runs in that directory, with `tempfile` pointed
there too, so nothing lands in the repository or stays in /tmp.

Output is compared with `ELLIPSIS | NORMALIZE_WHITESPACE`. Only what an example
prints to `sys.stdout` is compared: TensorFlow's logs go to stderr, and
examples pass `verbose=0` to `fit` and `predict` rather than print progress bars.
"""

import copy
import doctest
import importlib
import os
import pkgutil
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert

OPTION_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Docstrings (by test id) whose examples take more than 10 s.
SLOW = {
    "kbert.pretraining.dataset.pretraining_dataset",
    "kbert.models.multiple_choice.MultipleChoice",
    "kbert.builders.tagger",
}

MIN_DOCSTRINGS = 30


def module_names():
    names = ["kbert"]
    for info in pkgutil.walk_packages(kbert.__path__, prefix="kbert."):
        names.append(info.name)
    return sorted(names)


def find_docstrings():
    """`(module name, DocTest)` for every docstring with examples, sorted by name."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = []
    for name in module_names():
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            if test.examples:
                found.append((name, test))
    return sorted(found, key=lambda pair: pair[1].name)


DOCSTRINGS = find_docstrings()


def as_param(module_name, test):
    marks = []
    if test.name in SLOW:
        marks.append(pytest.mark.slow)
    return pytest.param(test, id=test.name, marks=marks)


def test_docstrings_are_found():
    assert len(DOCSTRINGS) >= MIN_DOCSTRINGS, [test.name for _, test in DOCSTRINGS]


def test_marked_names_exist():
    ids = {test.name for _, test in DOCSTRINGS}
    assert SLOW <= ids, SLOW - ids


def run_docstring(docstring, tmp_path, monkeypatch):
    """Runs one docstring's examples in `tmp_path`; returns doctest's result and report."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    test = copy.copy(docstring)
    test.globs = {
        **docstring.globs,
        "kbert": kbert,
        "np": np,
        "tf": tf,
        "keras": keras,
        "os": os,
        "folder": str(tmp_path),
    }
    runner = doctest.DocTestRunner(optionflags=OPTION_FLAGS)
    report = []
    try:
        result = runner.run(test, out=report.append, clear_globs=True)
    finally:
        # Keras' names start again for each docstring; what it built is
        # collected when tests/conftest.py sees the memory grow.
        keras.backend.clear_session(free_memory=False)
    return result, "".join(report)


def test_wrong_output_fails(tmp_path, monkeypatch):
    source = """
    >>> np.arange(3).tolist()
    [0, 1, 2]
    >>> open("note.txt", "w").write("hi"), sorted(os.listdir(folder))
    (2, ['note.txt'])
    >>> kbert.pretraining.documents.split_sentences("It rained. We stayed in.")
    ['It rained.', 'We stayed out.']
    """
    test = doctest.DocTestParser().get_doctest(source, {}, "wrong", "wrong.py", 0)
    result, report = run_docstring(test, tmp_path, monkeypatch)
    assert (result.attempted, result.failed) == (3, 1), report
    assert "We stayed out." in report


@pytest.mark.parametrize("docstring", [as_param(*pair) for pair in DOCSTRINGS])
def test_docstring(docstring, tmp_path, monkeypatch):
    result, report = run_docstring(docstring, tmp_path, monkeypatch)
    if result.failed:
        pytest.fail(
            f"{result.failed} of {result.attempted} examples failed:\n{report}",
            pytrace=False,
        )
