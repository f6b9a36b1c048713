"""A user's own files through the command line: train, evaluate, export and predict, from files made here."""

import csv
import hashlib
import json

import pytest

import kbert
from kbert import cli

SPAM = ["WIN a free prize, call now!", "URGENT: your account\nclaim the cash", 'Click "here" for a free gift']
HAM = ["see you at 5, ok?", "Lunch tomorrow?\nI'll bring the cake", 'She said "thanks" twice']
SMALL = ["--encoder", "tiny", "--epochs", "1", "--batch-size", "8", "--sequence-length", "24", "--quiet"]


def write_csv(path, rows, header=("msg_id", "text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)  # RFC 4180: quotes around fields with commas, quotes and line breaks
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def messages(count, start=0):
    return [(f"m{start + i}", (SPAM if i % 2 else HAM)[i % 3], "spam" if i % 2 else "ham") for i in range(count)]


@pytest.fixture(scope="module")
def spam_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    train = write_csv(folder / "train.csv", messages(40))
    test = write_csv(folder / "test.csv", messages(10, start=100))
    out = folder / "run"
    assert cli.main(["train", "--train", train, "--test", test, "--id-column", "msg_id", "--out", str(out),
                     *SMALL]) == 0
    return folder, out


def test_train_on_a_quoted_csv_records_its_data_and_classes(spam_run):
    folder, out = spam_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "files" and metrics["split"] == "test" and metrics["examples"] == 10
    assert metrics["file"] == str(folder / "test.csv") and metrics["positive_class"] == "spam"
    data = metrics["data"]
    assert data["classes"] == ["ham", "spam"] and data["validation_split"] == 0.1
    train = data["files"]["train"]
    assert train["sha256"] == hashlib.sha256((folder / "train.csv").read_bytes()).hexdigest()
    assert train["rows"] + data["files"]["validation"]["rows"] == 40  # no row lost to the quoted line breaks
    assert train["columns"] == {"text": "text", "label": "label", "id": "msg_id"}
    assert kbert.load_model(str(out / "model.keras")).class_names == ["ham", "spam"]


def test_evaluate_scores_files_and_never_a_named_data_set_by_accident(spam_run, capsys):
    folder, out = spam_run
    capsys.readouterr()
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(folder / "test.csv"),
                     "--out", str(folder / "scores.json")]) == 0
    scores = json.loads((folder / "scores.json").read_text())
    assert scores["task"] == "files" and scores["examples"] == 10 and "accuracy" in scores
    assert cli.main(["evaluate", str(out / "model.keras"), "--task", "sst2"]) == 2
    err = capsys.readouterr().err
    assert "was trained on your own files" in err and "--data FILE" in err and err.count("\n") == 1
    unknown = write_csv(folder / "other.csv", [("x", "hello", "eggs")])
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", unknown]) == 2
    assert "other.csv, line 2: the label 'eggs' is not one of the classes" in capsys.readouterr().err


def test_predict_answers_a_file_from_the_keras_model_and_the_export_alike(spam_run, capsys):
    folder, out = spam_run
    questions = write_csv(folder / "new.csv", [("q1", "free prize, call now"), ("q2", "lunch at 5?\nsee you")],
                          header=("msg_id", "text"))
    assert cli.main(["export", str(out / "model.keras"), "--name", "spam", "--out", str(folder / "served")]) == 0
    answers = {}
    for model in (str(out / "model.keras"), str(folder / "served" / "spam")):
        target = folder / f"predictions-{len(answers)}.jsonl"
        assert cli.main(["predict", model, "--file", questions, "--id-column", "msg_id", "--out", str(target)]) == 0
        answers[model] = [json.loads(line) for line in target.read_text().splitlines()]
    keras_answers, served_answers = answers.values()
    assert [row["id"] for row in keras_answers] == ["q1", "q2"]
    assert list(keras_answers[0]) == ["id", "label_ids", "labels", "probabilities"]
    for mine, theirs in zip(keras_answers, served_answers):
        assert mine["labels"] == theirs["labels"] in ("ham", "spam")
        assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-5)
    capsys.readouterr()
    pairs = write_csv(folder / "pairs.csv", [("a", "b")], header=("text", "text_pair"))
    assert cli.main(["predict", str(out / "model.keras"), "--file", pairs]) == 2
    assert "has pairs (its column 'text_pair'), but" in capsys.readouterr().err


def test_train_takes_a_headerless_tsv_with_stray_quotes_and_its_own_class_order(tmp_path):
    lines = [f'{text.replace(chr(10), " ")} "{i}\t{label}' for i, (_, text, label) in enumerate(messages(30))]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--labels", "spam,ham", "--validation-split", "0.2",
                     "--out", str(out), *SMALL]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["classes"] == ["spam", "ham"] and metrics["split"] == "validation"
    assert metrics["data"]["files"]["train"]["rows"] + metrics["examples"] == 30


def test_train_explains_what_it_needs_in_one_line(tmp_path, capsys):
    odd = write_csv(tmp_path / "odd.csv", [("1", "hello", "x")], header=("n", "body", "verdict"))
    assert cli.main(["train", "--train", odd, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "no column is the text by its name; the columns are ['n', 'body', 'verdict']" in err
    assert cli.main(["train", "sst2", "--train", odd, "--out", str(tmp_path / "run")]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["train", "--out", str(tmp_path / "run")]) == 2
    assert "kbert train --train FILE" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
