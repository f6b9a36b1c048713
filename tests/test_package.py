"""What `import kbert` sets up for the process."""

import os
import subprocess
import sys

import pytest

REPORT = (
    "import os; from tensorflow.python.util import _pywrap_util_port as port; "
    "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), port.IsMklEnabled())"
)


def run_python(code, **environment):
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(environment)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize(
    "code, environment, expected",
    [
        ("import kbert; " + REPORT, {}, ["1", "True"]),
        # The user's choice stands.
        ("import kbert; " + REPORT, {"TF_ENABLE_ONEDNN_OPTS": "0"}, ["0", "False"]),
        # TensorFlow read the switch already: kbert leaves it alone rather
        # than half-apply it.
        ("import tensorflow; import kbert; " + REPORT, {}, ["None", "False"]),
    ],
    ids=["kbert-first", "user-turned-off", "tensorflow-first"],
)
def test_import_turns_on_onednn_kernels_only_before_tensorflow(code, environment, expected):
    machine_default = run_python(REPORT)
    if machine_default[1] == "True":
        pytest.skip("TensorFlow turns oneDNN on by itself on this CPU")
    assert run_python(code, **environment) == expected


def test_the_version_is_kept_in_one_place_and_is_the_latest_in_the_changes():
    import re
    import tomllib

    import kbert

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as file:
        project = tomllib.load(file)
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kbert.__version__"}
    with open(os.path.join(root, "docs", "changes.rst"), encoding="utf-8") as file:
        latest = re.search(r"^(\d+\.\d+)", file.read(), re.MULTILINE).group(1)
    assert kbert.__version__.startswith(latest + ".")


# A line of TensorFlow's C++ log, as it prints them while it loads, and absl's banner before them.
TF_LOG_LINE = r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] "
ABSL_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def test_import_shows_tensorflows_load_lines_once_and_as_its_log_level_says():
    """TensorFlow's two libraries print the same lines while they load, before its log level applies."""
    import re

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    # Each line once at any level is `_as_log_level_says`'s test, below.
    levels = {"unset": {}, "3": {"TF_CPP_MIN_LOG_LEVEL": "3"}}
    processes = {name: subprocess.Popen([sys.executable, "-c", "import kbert"], env={**env, **extra},
                                        stderr=subprocess.PIPE, text=True) for name, extra in levels.items()}
    errors = {}
    for name, process in processes.items():
        _, errors[name] = process.communicate(timeout=300)
        assert process.returncode == 0, errors[name]
    assert not [line for line in errors["3"].splitlines() if re.match(TF_LOG_LINE, line) or line == ABSL_BANNER]
    # Each line once: the same place and message (the time and thread differ).
    logged = [re.sub(r"^([IWEF])\d{4} [\d:.]+ +\d+ ", r"\1 ", line) for line in errors["unset"].splitlines()
              if re.match(TF_LOG_LINE, line) or line == ABSL_BANNER]
    assert len(logged) == len(set(logged)), errors["unset"]


def test_tensorflows_load_lines_are_kept_as_the_log_level_says(monkeypatch):
    from kbert.backend.tensorflow_support import _as_log_level_says

    lines = [
        ABSL_BANNER + "\n",
        "I0000 00:00:1795939263.810148   28969 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n",
        "I0000 00:00:1795939263.957000   28969 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
        "appropriate compiler flags.\n",
        "W0000 00:00:1795939264.000000   28969 loader.cc:9] a warning.\n",
        "some Python warning\n",
        ABSL_BANNER + "\n",  # the second library
        "I0000 00:00:1795939280.746302   28969 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n",
        "E0000 00:00:1795939280.800000   28969 loader.cc:12] an error.\n",
    ]
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert _as_log_level_says(lines) == lines[:6] + [lines[8]]  # each once
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    assert _as_log_level_says(lines) == [ABSL_BANNER + "\n", lines[4], lines[5], lines[8]]
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    assert _as_log_level_says(lines) == ["some Python warning\n"]


@pytest.mark.parametrize("old, module, new", [
    ("Preprocessor", "kbert", "TextPacker"),
    ("Preprocessor", "kbert.preprocessing.preprocessor", "TextPacker"),
    ("LeanTransformerEncoder", "kbert.models.lean_transformer_encoder", "TransformerBlock"),
])
def test_a_renamed_public_name_still_works_for_one_release_and_says_its_new_name(old, module, new):
    import importlib

    import kbert

    with pytest.warns(DeprecationWarning, match=f"`{module}.{old}` is deprecated: use `(kbert.)?{new}`"):
        value = getattr(importlib.import_module(module), old)
    assert value.__name__ == new
    assert old not in kbert.__all__ and new in kbert.__all__ + ["TransformerBlock"]
