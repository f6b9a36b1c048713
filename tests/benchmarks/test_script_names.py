"""A benchmark script's folder comes first on Python's path: no script may take the name of a module that others import."""

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Standard-library modules of Pythons newer than this one (3.14's `compression`, which JAX imports when present).
NEWER_STANDARD_LIBRARY = {"compression", "annotationlib"}


def test_no_script_hides_a_module_of_the_standard_library_or_the_environment():
    path = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCHMARKS]
    for script in BENCHMARKS.glob("*.py"):
        name = script.stem
        assert name not in sys.stdlib_module_names | NEWER_STANDARD_LIBRARY, script
        assert importlib.machinery.PathFinder.find_spec(name, path) is None, script


def test_a_script_starts_with_every_backend_library_installed():
    result = subprocess.run([sys.executable, str(BENCHMARKS / "speed.py"), "--help"], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": "tensorflow"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--presets" in result.stdout
