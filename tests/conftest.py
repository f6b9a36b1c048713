"""Groups tests for pytest-xdist (`make test` runs two workers with `--dist loadgroup`).

A group runs whole on one worker, so a fixture is built once per group:
- a folder whose conftest builds costly session fixtures is one group
  (tests/serving exports six models once);
- each tutorial is a group of its own (they share nothing and are the
  longest tests, so they spread over the workers);
- any other module is one group, so its module fixtures are built once.
"""

import os

import pytest

# Tests never reach the Hugging Face Hub: names resolve from the cache only.
# Set before `import kbert`, which imports huggingface_hub (it reads this once).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Before any test module imports TensorFlow: the tests run with the settings
# `import kbert` gives users (TensorFlow's oneDNN kernels on).
import kbert  # noqa: E402, F401

FOLDER_GROUPS = ("serving", "checkpoints")


def xdist_group_of(item):
    parts = item.nodeid.split("::")[0].split("/")
    if len(parts) > 2 and parts[1] in FOLDER_GROUPS:
        return parts[1]
    if parts[-1] == "test_tutorials.py":
        return item.nodeid
    return "/".join(parts)


# First, so pytest-xdist's own hook sees the groups when it reads them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
