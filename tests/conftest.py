"""Groups tests for pytest-xdist (`make test` runs two workers with `--dist loadgroup`).

A group runs whole on one worker, so a fixture is built once per group:
- a folder whose conftest builds costly session fixtures is one group
  (tests/serving exports six models once; tests/backend runs each other
  backend's jobs in one process);
- each tutorial is a group of its own (they share nothing and are the
  longest tests, so they spread over the workers);
- any other module is one group, so its module fixtures are built once.

Memory (a worker of `make test` stays under 4 GB): each process prints its peak at the end
(tests/memory.py); what a test frees goes back to the system, and when a
module ends, the models and graphs only it held go too (`release_memory`);
the few tests that build a gigabyte-sized model run in a process of their
own (`OWN_PROCESS`).
"""

import ctypes
import ctypes.util
import gc
import os
import subprocess
import sys

import pytest

# Tests never reach the Hugging Face Hub: names resolve from the cache only.
# Set before `import kbert`, which imports huggingface_hub (it reads this once).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.memory import MemoryReport, current_mb

# TensorFlow's oneDNN build keeps every tensor buffer it ever allocated in a
# pool it never returns: a worker would stay at the largest memory any test
# needed (12 GB), plus what later tests need on top. The system allocator
# returns freed buffers (the kernels and their results are the same). Set
# before TensorFlow first allocates; subprocesses and notebook kernels
# inherit it.
os.environ.setdefault("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "1")

# Before any test module imports TensorFlow: the tests run with the settings
# `import kbert` gives users (TensorFlow's oneDNN kernels on).
import kbert  # noqa: E402, F401

FOLDER_GROUPS = ("serving", "checkpoints", "backend")

# The shared harnesses, named as keras-hub names its own: a module of helpers, not of tests.
collect_ignore = ["test_case.py"]

# Tests whose model alone takes gigabytes (BERT-large: 1.3 GB of weights, 2 GB
# while it is built): each runs in a pytest process of its own, so that memory
# does not come on top of what its worker already holds.
OWN_PROCESS = {
    "tests/models/test_encoder.py::test_paper_sizes_have_the_papers_parameter_counts[large-335141888]",
}
IN_OWN_PROCESS = "KBERT_TEST_IN_OWN_PROCESS"  # set in that process


def xdist_group_of(item):
    parts = item.nodeid.split("::")[0].split("/")
    if len(parts) > 2 and parts[1] in FOLDER_GROUPS:
        return parts[1]
    if parts[-1] == "test_tutorials.py":
        return item.nodeid
    return "/".join(parts)


def run_in_own_process(item):
    """Replaces the test's call by a pytest run of that test alone, which must pass."""
    nodeid, root = item.nodeid, str(item.config.rootpath)
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}

    def runtest():
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid],
            cwd=root, env={**environment, IN_OWN_PROCESS: "1"}, capture_output=True, text=True,
        )
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines or not lines[-1].startswith("1 passed"):
            pytest.fail(f"{nodeid}, run in a process of its own:\n{result.stdout}\n{result.stderr[-3000:]}",
                        pytrace=False)

    item.runtest = runtest


# First, so pytest-xdist's own hook sees the groups when it reads them (and
# before it appends the group to the node ids).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    import keras

    for item in items:
        if keras.config.backend() != "tensorflow" and item.get_closest_marker("tensorflow_backend"):
            item.add_marker(pytest.mark.skip(reason="runs on Keras' TensorFlow backend only"))
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
        if item.nodeid in OWN_PROCESS and not os.environ.get(IN_OWN_PROCESS):
            run_in_own_process(item)
    # The groups that hold a slow test go first (pytest-xdist hands groups out
    # in this order): a long group handed out last keeps one worker busy
    # while the other waits.
    slow_groups = {xdist_group_of(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: xdist_group_of(item) not in slow_groups)


def pytest_configure(config):
    # Each worker's peak memory and the modules that grew it, printed at the end.
    config.pluginmanager.register(MemoryReport(config), "kbert-memory-report")


def _malloc_trim():
    """glibc's `malloc_trim`, which hands the heap's free pages back to the system; elsewhere a no-op."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return lambda pad: 0


malloc_trim = _malloc_trim()


COLLECT_AFTER_MB = 100


collected_at_mb = 0.0  # resident memory after the last collection of ours


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # After the test's fixtures are gone. A model lives in reference cycles
    # that Python's collector, which counts objects, not bytes, may not look
    # at for a while: once memory has grown by 100 MB since the last
    # collection here (in one test or over several), they are collected now.
    # A collection walks the objects made since the last module ended (what
    # is older is frozen: see `freeze_survivors`), so small tests do not
    # each pay for one. Then freed memory goes from the C heap back to the
    # system (a few milliseconds).
    global collected_at_mb
    if current_mb() - collected_at_mb > COLLECT_AFTER_MB:
        gc.collect()
        malloc_trim(0)
        collected_at_mb = current_mb()
    else:
        malloc_trim(0)


@pytest.fixture(autouse=True, scope="module")
def release_memory():
    """After each module: Keras' global state, unreachable models and graphs, freed heap pages.

    What a module no longer holds goes (its module fixtures are torn down
    before this one); what is still held stays (a folder group's session
    fixtures). TensorFlow itself keeps a graph of each model's training
    step (kbert builds the optimizer, metrics and losses before the step is
    traced, so that it is one graph, not two and one per variable).
    """
    yield
    import keras

    global collected_at_mb
    keras.backend.clear_session(free_memory=False)
    if keras.config.backend() == "jax":
        import jax

        # Compiled steps stay in JAX's caches, keyed by functions of models now gone.
        jax.clear_caches()
    freeze_survivors()
    malloc_trim(0)
    collected_at_mb = current_mb()


def freeze_survivors():
    """Collects, then moves what survives out of the collector's sight (`gc.freeze`).

    What outlives a module (imported modules, TensorFlow's kept graphs, a
    folder group's session fixtures) would otherwise be walked by every
    later collection, the automatic ones in the middle of a trace included:
    our own collections alone took 7 % of a worker's time. A frozen object is
    still freed when its reference count drops to zero; only a cycle
    through it stays (the process ends with the run).
    """
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session):
    # Imports and collected tests live for the whole run.
    freeze_survivors()
