"""The named data sets are read through the path of a user's own files: the same readers and checks."""

import pytest

from kbert.runs.fine_tuning import load_split
from kbert.runs.recipes import RECIPES
from kbert.runs.named_data import NAMED_FILES, named_file_data

# Examples of each split: GLUE's, SICK's SemEval sets, SMS Spam's fixed 80/20, SQuAD dev's article ranges,
# CoNLL-2003's sentences (shared/data README).
SIZES = {
    "sst2": (67349, 872), "rte": (2490, 277), "mrpc": (3668, 408), "cola": (8551, 1043), "stsb": (5749, 1500),
    "wnli": (635, 71), "sms_spam": (4459, 1115), "sick": (4439, 495, 4906), "squad": (8582, 1988),
    "conll2003": (14041, 3250, 3453),
}


def test_every_named_recipe_reads_its_files_as_a_users_files_are():
    assert set(NAMED_FILES) == set(RECIPES) == set(SIZES)
    for task, sizes in SIZES.items():
        splits = [load_split(task, split) for split in RECIPES[task].splits]
        assert tuple(len(x if y is None else y) for x, y in splits) == sizes, task
    (sentences, labels), _ = [load_split("cola", split) for split in ("train", "dev")]
    assert sentences[0] == "Our friends won't buy this analysis, let alone the next one we propose."
    assert sorted(set(labels)) == [0, 1] and labels.count(1) == 6023
    (pairs, scores) = load_split("stsb", "train")
    assert pairs[0][0] == "A plane is taking off." and scores[:2] == [5.0, 3.8]
    (premises, _), labels = load_split("sick", "trial")
    assert premises[0].startswith("The young boys are playing") and labels[0] == 2  # CONTRADICTION, the third
    (_, second), labels = load_split("mrpc", "dev")
    assert second[0].startswith('" The foodservice pie business') and labels[0] == 1
    words, tags = load_split("conll2003", "test")
    assert words[0][:2] == ["SOCCER", "-"] and "B-LOC" in tags[0]  # IOB1 read as IOB2
    assert RECIPES["cola"].metric == "matthews_correlation" and RECIPES["stsb"].metric == "pearson"


def test_a_named_data_sets_bad_row_is_named_with_its_file_and_line(tmp_path, monkeypatch):
    folder = tmp_path / "glue" / "RTE"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tmaybe\n")
    (folder / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
    monkeypatch.setenv("KBERT_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=r"train.tsv, line 3: .*'maybe'"):
        named_file_data("rte", str(tmp_path))
