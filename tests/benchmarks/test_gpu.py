"""benchmarks/gpu.py at its tiny size on the CPU: every path it measures runs, and its table and JSON say so."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# torch.compile's row is left out: compiling for the CPU takes minutes, and it
# runs the same code as the eager `transformers` row.
PATHS = ["kbert-jax", "kbert-torch", "keras-hub-torch", "transformers"]


@pytest.mark.tensorflow_backend  # it starts each path's process with its own backend
def test_the_tiny_benchmark_measures_every_path(tmp_path):
    out = tmp_path / "gpu-tiny.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--tiny", "--paths", *PATHS,
         "--workloads", "train_32x128", "--timed-steps", "1", "--out", str(out)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [row["path"] for row in report["rows"]] == PATHS
    for row in report["rows"]:
        assert "error" not in row, row
        assert row["sequences_per_second"] > 0 and row["sequences_per_second_per_step"] > 0
        assert row["tflops"] > 0 and row["tflops_per_step"] > 0 and row["device"].startswith("cpu")
        assert (row["batch_size"], row["sequence_length"]) == (4, 32)
        if not row["path"].startswith("transformers"):  # Keras' `fit`: where the host's time per step went
            functions = row["host_profile"]["functions"]
            assert functions and all(f["own_ms_per_step"] >= 0 and f["calls_per_step"] > 0 for f in functions)
    assert report["model"]["num_layers"] == 2
    # The table: two rows per path (the whole call, and the loss read each step), a column per workload.
    lines = result.stdout.splitlines()
    assert "| path | timing | train_32x128 |" in lines
    for path in PATHS:
        for timing in ("whole call", "per step"):
            assert any(line.startswith(f"| {path} | {timing} | ") and "TFLOP/s" in line for line in lines)


def test_a_time_limit_for_a_path_it_does_not_measure_is_refused_in_one_line():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--tiny", "--paths", "kbert-jax",
         "--path-seconds", "60", "kbert-jaxx=90"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert "--path-seconds: no path 'kbert-jaxx'" in result.stderr.splitlines()[-1]
