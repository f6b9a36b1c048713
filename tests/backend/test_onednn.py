import json
import os
import subprocess
import sys

import pytest

from kbert.backend.onednn import ADVICE, onednn_advice

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_advice_only_when_off_by_no_choice_of_the_user_on_x86():
    assert onednn_advice(False, switch="", machine="x86_64") == ADVICE
    assert onednn_advice(False, switch="1", machine="AMD64") == ADVICE  # asked for, yet off
    assert onednn_advice(True, switch="", machine="x86_64") is None
    assert onednn_advice(False, switch="0", machine="x86_64") is None
    assert onednn_advice(False, switch="false", machine="x86_64") is None
    assert onednn_advice(False, switch="", machine="aarch64") is None
    assert "Import kbert before tensorflow" in ADVICE and "TF_ENABLE_ONEDNN_OPTS=1" in ADVICE


def imported(order, switch=None):
    """What a fresh Python that imports `order` in turn sees: oneDNN on, and kbert's warnings."""
    script = (
        "import json, warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        + "".join(f"    import {name}\n" for name in order)
        + "from kbert.backend.onednn import ADVICE, onednn_enabled\n"
        "print(json.dumps({'enabled': onednn_enabled(),\n"
        "                  'warned': any(str(w.message) == ADVICE for w in caught)}))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if switch is not None:
        environment["TF_ENABLE_ONEDNN_OPTS"] = switch
    environment["PYTHONPATH"] = REPOSITORY + os.pathsep + environment.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                            text=True, timeout=300, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="TensorFlow's oneDNN kernels are for x86 CPUs")
def test_kbert_first_turns_onednn_on_and_tensorflow_first_warns_when_it_is_off():
    assert imported(["kbert", "tensorflow"]) == {"enabled": True, "warned": False}
    # TensorFlow first decides by itself (on only on CPUs with AVX-512 VNNI or
    # AMX); whenever it decided off, kbert says so.
    tensorflow_first = imported(["tensorflow", "kbert"])
    assert tensorflow_first["warned"] == (not tensorflow_first["enabled"])
    # Off by the user's choice: no warning.
    assert imported(["tensorflow", "kbert"], switch="0") == {"enabled": False, "warned": False}
