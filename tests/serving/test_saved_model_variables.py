"""`kbert predict` on an export whose variables are truncated, corrupt or another model's: one line naming the file."""

import os
import shutil

import pytest

from kbert import cli

DATA = os.path.join("variables", "variables.data-00000-of-00001")
INDEX = os.path.join("variables", "variables.index")


def broken_copy(exported, tmp_path, breakage):
    """A copy of the exported classifier's version folder, broken as `breakage` says; the file to name."""
    copy = tmp_path / "classifier"
    shutil.copytree(exported["classifier"][1], copy)
    if breakage == "truncated":
        with open(copy / DATA, "r+b") as file:
            file.truncate(os.path.getsize(copy / DATA) // 2)
        return copy, DATA, "truncated"
    if breakage == "corrupt":  # the sizes fit; the checksum of a tensor does not
        with open(copy / DATA, "r+b") as file:
            file.seek(100)
            file.write(b"\xff" * 64)
        return copy, DATA, "truncated or corrupt"
    # Another model's variables: the tagger's (only its head differs from
    # the classifier's), told by fingerprint.pb; then the embedder's (no head
    # at all) in a copy without fingerprint.pb, told by the graph.
    other = {"another-model": "tagger", "another-model-unfingerprinted": "embedder"}[breakage]
    shutil.rmtree(copy / "variables")
    shutil.copytree(os.path.join(exported[other][1], "variables"), copy / "variables")
    if other == "embedder":
        os.remove(copy / "fingerprint.pb")
        return copy, INDEX, "do not fit the SavedModel's graph"
    return copy, INDEX, "not the variables this SavedModel was saved with"


@pytest.mark.parametrize("trust", [[], ["--trust"]], ids=["checked", "trusted"])
@pytest.mark.parametrize("breakage", ["truncated", "corrupt", "another-model", "another-model-unfingerprinted"])
def test_broken_variables_are_named_in_one_line(exported, tmp_path, capsys, breakage, trust):
    copy, file, problem = broken_copy(exported, tmp_path, breakage)
    assert cli.main(["predict", str(copy), "the cat sat", *trust]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"kbert predict: error: {copy / file}: ") and problem in lines[0], lines[0]
    assert captured.out == ""
