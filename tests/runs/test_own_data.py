"""A run's own files: split, classes and the record metrics.json keeps of them."""

import hashlib

import pytest

from kbert.data import DataFormatError
from kbert.runs.own_data import read_file_data, stratified_split


def write(path, text):
    path.write_text(text)
    return str(path)


def test_the_validation_split_is_stratified_seeded_and_recorded(tmp_path):
    rows = [f"text {i},{'rare' if i % 10 == 0 else 'common'}" for i in range(100)]
    train = write(tmp_path / "train.csv", "text,label\n" + "\n".join(rows) + "\n")
    data = read_file_data(train, validation_split=0.2, seed=3)
    assert data.class_names == ["common", "rare"]
    assert (len(data.train), len(data.validation)) == (80, 20)
    assert data.validation.labels.count("rare") == 2 and data.train.labels.count("rare") == 8
    assert set(data.train.line_numbers).isdisjoint(data.validation.line_numbers)
    again = read_file_data(train, validation_split=0.2, seed=3)
    assert again.validation.line_numbers == data.validation.line_numbers
    assert read_file_data(train, validation_split=0.2, seed=4).validation.line_numbers != data.validation.line_numbers
    record = data.record()
    assert record["classes"] == ["common", "rare"] and record["validation_split"] == 0.2
    sha256 = hashlib.sha256(open(train, "rb").read()).hexdigest()
    assert record["files"]["train"] == {"path": train, "sha256": sha256, "rows": 80, "format": "csv",
                                        "columns": {"text": "text", "label": "label"}}
    assert record["files"]["validation"]["part_of"] == "train" and "test" not in record["files"]


def test_a_label_training_never_saw_is_named_with_its_file_and_line(tmp_path):
    train = write(tmp_path / "train.csv", "text,label\na,x\nb,y\n")
    test = write(tmp_path / "test.csv", "text,label\na,x\nb,z\n")
    with pytest.raises(DataFormatError, match=r"test\.csv, line 3: the label 'z' is not one of the classes"):
        read_file_data(train, test=test)
    with pytest.raises(DataFormatError, match=r"train\.csv, line 3: the label 'y' is not one of"):
        read_file_data(train, labels=["x", "w"])
    data = read_file_data(train, validation=train, labels=["y", "x"])
    assert data.xy("train") == (["a", "b"], [1, 0])


def test_the_labels_choose_the_task_and_a_label_that_does_not_fit_it_is_named(tmp_path):
    scores = write(tmp_path / "scores.jsonl", '{"text": "a", "label": 0.5}\n{"text": "b", "label": 4.25}\n'
                                              '{"text": "c", "label": 1}\n')
    data = read_file_data(scores, validation=scores)
    assert data.task_type == "regression" and data.xy("train") == (["a", "b", "c"], [0.5, 4.25, 1.0])
    broken = write(tmp_path / "broken.tsv", "text\tscore\na\t0.5\nb\thigh\n")
    with pytest.raises(DataFormatError, match=r"broken\.tsv, line 3: the label 'high' is not a number"):
        read_file_data(broken, task_type="regression")
    tags = write(tmp_path / "tags.jsonl", '{"text": "a", "labels": ["x", "y"]}\n{"text": "b", "labels": []}\n'
                                          '{"text": "c", "labels": ["y"]}\n')
    data = read_file_data(tags, validation=tags)
    assert data.task_type == "multi-label" and data.class_names == ["x", "y"]
    assert data.xy("train")[1] == [["x", "y"], [], ["y"]]
    one = write(tmp_path / "one.csv", "text,label\na,x\nb,x\n")
    with pytest.raises(ValueError, match=r"every example has the label 'x'"):
        read_file_data(one)


def test_stratified_split_gives_every_class_of_two_or_more_to_both_sides():
    train, validation = stratified_split([0] * 50 + [1] * 2 + [2], 0.1)
    assert sorted(train + validation) == list(range(53))
    assert [i for i in validation if i >= 50] == [50] or [i for i in validation if i >= 50] == [51]
    assert 52 in train
