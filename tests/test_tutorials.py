"""Every tutorial notebook runs from top to bottom, at its quick size."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

TUTORIALS = sorted((Path(__file__).parents[1] / "tutorials").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_TUTORIAL_QUICK", "1")
    notebook = nbformat.read(path, as_version=4)
    # A failing cell raises CellExecutionError with its traceback.
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]


def test_there_are_tutorials():
    assert TUTORIALS, "tutorials/ has no notebooks"
    for path in TUTORIALS:
        notebook = nbformat.read(path, as_version=4)
        # Notebooks are stored without outputs: what runs is what is read.
        assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
        assert os.path.getsize(path) < 100_000
