"""benchmarks/fused_attention_check.py at its tiny size on the CPU: each backend's check runs and says what it found."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.tensorflow_backend  # it starts each backend's process itself
def test_the_tiny_check_compares_both_kernels_on_every_mask(tmp_path):
    out = tmp_path / "check.json"
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fused_attention_check.py"),
                             "--tiny", "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(row["backend"], row["mask"]) for row in rows] == [
        (backend, mask) for backend in ("jax", "torch") for mask in ("none", "trailing padding", "holes")]
    for row in rows:
        assert row["passed"] and row["kernel"] in ("xla", "scaled_dot_product_attention"), row
        # bfloat16 is off float32 by about its precision, on both paths; neither is exact nor wild.
        for path in ("fused", "explicit"):
            assert 1e-4 < row["errors"][path]["output"] < 5e-2 and 1e-4 < row["errors"][path]["gradient"] < 5e-2
    assert "| torch | holes | scaled_dot_product_attention |" in result.stdout
