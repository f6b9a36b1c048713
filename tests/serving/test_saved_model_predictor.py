"""`kbert predict` and SavedModelPredictor: texts to JSON answers from the SavedModel of every task."""

import json

import numpy as np
import pytest

from kbert import cli
from kbert.serving import SavedModelPredictor


def predict_lines(capsys, path, texts):
    assert cli.main(["predict", path, *texts]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


def test_a_classifier_answers_with_labels(exported, capsys):
    model, path = exported["classifier"]
    texts = ["the cat sat", "free prize now"]
    lines = predict_lines(capsys, path.rsplit("/", 1)[0], texts)  # the model folder: its newest version
    expected = model.predict_proba(texts, verbose=0)
    np.testing.assert_allclose([line["probabilities"] for line in lines], expected, atol=1e-5)
    assert [line["labels"] for line in lines] == [model.class_names[i] for i in expected.argmax(-1)]


def test_pairs_questions_and_choices_are_grouped_in_input_order(exported, capsys):
    model, path = exported["pair_classifier"]
    lines = predict_lines(capsys, path, ["the cat", "sat", "a dog", "ran"])
    expected = model.predict_proba((["the cat", "a dog"], ["sat", "ran"]), verbose=0)
    np.testing.assert_allclose([line["probabilities"] for line in lines], expected, atol=1e-5)

    model, path = exported["question_answerer"]
    (answer,) = predict_lines(capsys, path, ["who sat ?", "the dog sat on the mat ."])
    (expected,) = model.answer(questions=["who sat ?"], contexts=["the dog sat on the mat ."], verbose=0)
    assert (answer["text"], answer["start"], answer["end"]) == (expected["text"], expected["start"], expected["end"])
    assert len(answer["candidate_texts"]) == answer["candidate_counts"]

    model, path = exported["multiple_choice"]
    (choice,) = predict_lines(capsys, path, ["the cat", "sat", "dog"])
    assert choice["choice_ids"] == int(model.choose((["the cat"], [["sat", "dog"]]), verbose=0)[0])


def test_tags_come_per_word_without_padding(exported, capsys):
    _, path = exported["tagger"]
    short, long = predict_lines(capsys, path, ["dogs !", "the cat sat on the mat ."])
    assert short["words"] == ["dogs", "!"] and len(short["tags"]) == len(short["scores"]) == 2
    assert long["words"] == ["the", "cat", "sat", "on", "the", "mat", "."]
    assert long["word_starts"][-1] == 23 and long["word_ends"][-1] == 24


def test_a_wrong_number_of_texts_is_explained(exported, capsys):
    _, path = exported["question_answerer"]
    assert cli.main(["predict", path, "a question without its context"]) == 2
    assert "takes 2 texts per example (question, context); got 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Missing inputs"):
        SavedModelPredictor(path).predict({"question": ["who?"]})


def test_any_bytes_reach_the_model_from_a_file_stdin_or_arguments(exported, capsys, tmp_path, monkeypatch):
    import io
    import os

    _, path = exported["classifier"]
    # Not UTF-8: the model's tokenizer drops the bad bytes (as U+FFFD) and
    # answers as for the rest of the text.
    invalid = b"free \xff\xfe prize now"
    texts = tmp_path / "texts.txt"
    texts.write_bytes(invalid + b"\r\nthe cat sat\n\n")
    from_file = predict_lines(capsys, path, ["--file", str(texts)])
    assert len(from_file) == 3  # the empty line is an empty text
    expected = SavedModelPredictor(path).predict_texts(["free  prize now", "the cat sat", ""])
    np.testing.assert_allclose([line["probabilities"] for line in from_file],
                               [e["probabilities"] for e in expected], atol=1e-6)

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(invalid + b"\n")))
    from_stdin = predict_lines(capsys, path, ["--file", "-"])
    # Python keeps undecodable bytes of an argument as surrogates; they are sent back as bytes.
    from_argument = predict_lines(capsys, path, [os.fsdecode(invalid)])
    assert from_stdin == from_argument == from_file[:1]
    # Lines end as in every text file kbert reads: CR alone too, after a byte-order mark.
    texts.write_bytes(b"\xef\xbb\xbf" + invalid + b"\rthe cat sat\r\r")
    assert predict_lines(capsys, path, ["--file", str(texts)]) == from_file


def test_predict_needs_texts(exported, capsys):
    _, path = exported["classifier"]
    assert cli.main(["predict", path]) == 2
    assert "--file" in capsys.readouterr().err


def test_a_saved_model_that_touches_files_is_refused_unless_trusted(file_touching_model, capsys):
    path, _, written = file_touching_model
    assert cli.main(["predict", path, "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kbert predict: error: Refused to load the SavedModel at {path}: ") and "\n" not in err
    assert "['ReadFile', 'WriteFile']" in err and "--trust" in err
    with pytest.raises(ValueError, match=r"Refused to load .* \['ReadFile', 'WriteFile'\]"):
        SavedModelPredictor(path)
    assert not written.exists()  # refused before it ran

    assert cli.main(["predict", "--trust", path, "hello"]) == 0
    assert json.loads(capsys.readouterr().out) == {"labels": "hello the secret"}
    assert written.read_text() == "hello"


def test_export_name_is_one_folder_name(exported, tmp_path, capsys):
    model, _ = exported["classifier"]
    keras_file = tmp_path / "model.keras"
    model.save(str(keras_file))
    for name in ("../../elsewhere", "/abs/path", "", "..", "a/b"):
        assert cli.main(["export", str(keras_file), "--name", name, "--out", str(tmp_path / "served")]) == 2
        assert "is not a model name: one folder name" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.keras"]
