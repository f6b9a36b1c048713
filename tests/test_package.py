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
