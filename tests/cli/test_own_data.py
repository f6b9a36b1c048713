"""A user's own files through the command line: train, evaluate, export and predict, from files made here."""

import csv
import hashlib
import json

import numpy as np
import pytest

import kbert
from kbert import cli

SPAM = ["WIN a free prize, call now!", "URGENT: your account\nclaim the cash", 'Click "here" for a free gift']
HAM = ["see you at 5, ok?", "Lunch tomorrow?\nI'll bring the cake", 'She said "thanks" twice']
SMALL = ["--encoder", "tiny", "--epochs", "1", "--batch-size", "8", "--sequence-length", "24", "--quiet"]
# A vocabulary of the words here: BERT's 30,522 would only make each test slower.
WORDS = ("win a free prize call now urgent your account claim the cash click here for gift see you at ok lunch "
         "tomorrow i ' ll bring cake she said thanks twice patient anna lee took aspirin 200 mg daily where did cat "
         "sit on mat who slept dog in garden all afternoon sat hello 5 , . ! ? : \"").split()


@pytest.fixture(autouse=True, scope="module")
def small_vocabulary(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocabulary") / "vocab.txt"
    path.write_text("\n".join(list(kbert.SPECIAL_TOKENS) + sorted(set(WORDS))) + "\n")
    SMALL.extend(["--vocabulary", str(path)])
    yield
    del SMALL[-2:]


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


def test_a_headerless_tsv_with_stray_quotes_and_its_own_class_order_trains_evaluates_and_predicts(tmp_path, capsys):
    lines = [f'{text.replace(chr(10), " ")} "{i}\t{label}' for i, (_, text, label) in enumerate(messages(30))]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--labels", "spam,ham", "--validation-split", "0.2",
                     "--packing", "--out", str(out), *SMALL]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["classes"] == ["spam", "ham"] and metrics["split"] == "validation"
    assert metrics["settings"]["packing"] is True
    assert metrics["data"]["files"]["train"]["rows"] + metrics["examples"] == 30
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(train), "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 30
    assert cli.main(["export", str(out / "model.keras"), "--name", "m", "--out", str(tmp_path / "served")]) == 0
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "served" / "m"), "--file", str(train)]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(answers) == 30 and all(answer["labels"] in ("spam", "ham") for answer in answers)


def test_train_explains_what_it_needs_in_one_line(tmp_path, capsys):
    odd = write_csv(tmp_path / "odd.csv", [("1", "hello", "x")], header=("n", "body", "verdict"))
    assert cli.main(["train", "--train", odd, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "no column is the text by its name; the columns are ['n', 'body', 'verdict']: name it with --text-column" in err
    assert cli.main(["train", "sst2", "--train", odd, "--out", str(tmp_path / "run")]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["train", "--out", str(tmp_path / "run")]) == 2
    assert "kbert train --train FILE" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


TAGGED = [("the", "O"), ("patient", "O"), ("Anna", "B-PER"), ("Lee", "I-PER"), ("took", "O"),
          ("aspirin", "B-DRUG"), ("200", "B-DOSE"), ("mg", "I-DOSE"), ("daily", "B-FREQ"), (".", "O")]


def test_a_two_column_conll_file_with_its_own_tags_trains_evaluates_and_predicts(tmp_path, capsys):
    sentence = "\n".join(f"{word}\t{tag}" for word, tag in TAGGED)
    train = tmp_path / "drugs.conll"
    train.write_text("\n\n".join([sentence] * 12) + "\n")
    bioes = tmp_path / "test.bioes"  # the same sentence in BIOES: S- a one-word entity, E- an entity's end
    bioes.write_text(sentence.replace("B-DRUG", "S-DRUG").replace("I-PER", "E-PER").replace("I-DOSE", "E-DOSE")
                     .replace("B-FREQ", "S-FREQ") + "\n")
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--test", str(bioes), "--packing", "--out", str(out),
                     *SMALL]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["packing"] is True
    assert metrics["data"]["task_type"] == "tagging" and metrics["examples"] == 1
    tags = ["O", "B-DOSE", "I-DOSE", "B-DRUG", "I-DRUG", "B-FREQ", "I-FREQ", "B-PER", "I-PER"]
    assert metrics["data"]["tags"] == tags and metrics["support"] == 4
    assert kbert.load_model(str(out / "model.keras")).labels == tags
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(train), "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["support"] == 48
    unknown = tmp_path / "other.conll"
    unknown.write_text("Paris\tB-LOC\n")
    capsys.readouterr()
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(unknown)]) == 2
    assert "other.conll, line 1: unknown tag 'B-LOC'" in capsys.readouterr().err
    assert cli.main(["export", str(out / "model.keras"), "--name", "m", "--out", str(tmp_path / "served")]) == 0
    texts = write_csv(tmp_path / "texts.csv", [("s1", "Anna Lee took aspirin 200 mg daily .")], header=("id", "text"))
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "served" / "m"), "--file", texts]) == 0
    [answer] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answer["id"] == "s1" and answer["words"] == [word for word, _ in TAGGED[2:]]
    assert set(answer["tags"]) <= set(tags)


def test_squad_format_json_from_any_path_trains_and_answers(tmp_path, capsys):
    context = "The cat sat on the mat. The dog slept in the garden all afternoon."
    questions = [("Where did the cat sit?", "on the mat"), ("Who slept?", "The dog")]
    articles = [{"title": f"story {a}", "paragraphs": [{"context": context, "qas": [
        {"id": f"{a}-{i}", "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}
        for i, (question, answer) in enumerate(questions)]}]} for a in range(5)]
    train = tmp_path / "my questions.json"
    train.write_text(json.dumps({"version": "1.1", "data": articles}))
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--out", str(out), *SMALL, "--sequence-length", "48",
                     "--packing"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["packing"] is True
    assert metrics["data"]["task_type"] == "question-answering" and "f1" in metrics
    # Whole articles go to validation: no context is on both sides.
    assert metrics["data"]["files"]["validation"]["rows"] == 2 and metrics["train_examples"] == 8
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(train), "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 10
    assert cli.main(["export", str(out / "model.keras"), "--name", "m", "--out", str(tmp_path / "served")]) == 0
    asked = write_csv(tmp_path / "ask.csv", [("Who slept?", context)], header=("question", "context"))
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "served" / "m"), "--file", asked]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["id"] == "2" and answer["text"] == context[answer["start"]:answer["end"]]


@pytest.mark.parametrize("kind", ["multi-label", "regression"])
def test_multi_label_json_lines_and_a_regression_tsv_train_export_and_predict(tmp_path, capsys, kind):
    if kind == "multi-label":
        rows = [{"id": i, "text": SPAM[i % 3] if i % 2 else HAM[i % 3],
                 "labels": (["spam", "urgent"] if i % 4 == 1 else ["spam"]) if i % 2 else []} for i in range(24)]
        train = tmp_path / "train.jsonl"
        train.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    else:
        lines = ["sentence1\tsentence2\tscore"] + [f'{HAM[i % 3]!r}\t"{SPAM[i % 3]!r}\t{i % 5 + 0.25:.3f}'
                                                     for i in range(24)]
        train = tmp_path / "train.tsv"
        train.write_text("\n".join(line.replace("\n", " ") for line in lines) + "\n")
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--out", str(out), *SMALL]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["task_type"] == kind
    model = kbert.load_model(str(out / "model.keras"))
    if kind == "multi-label":
        assert metrics["data"]["classes"] == ["spam", "urgent"] and "micro_f1" in metrics and "macro_f1" in metrics
        assert model.problem_type == "multi_label" and len(model.preprocessor.thresholds) == 2
    else:
        assert {"pearson", "spearman", "mse"} <= set(metrics) and metrics["data"]["label"] == "score"
        assert model.problem_type == "regression"
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(train)]) == 0
    assert cli.main(["export", str(out / "model.keras"), "--name", "m", "--out", str(tmp_path / "served")]) == 0
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "served" / "m"), "--file", str(train)]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(answers) == 24
    if kind == "multi-label":
        assert answers[0]["id"] == "0" and set(answers[0]) == {"id", "label_mask", "labels", "probabilities"}
        assert all(set(answer["labels"]) <= {"spam", "urgent"} for answer in answers)
    else:
        assert answers[0]["id"] == "2" and isinstance(answers[0]["scores"], float)


def test_distill_and_prune_take_the_same_files(spam_run):
    folder, out = spam_run
    train, test = str(folder / "train.csv"), str(folder / "test.csv")
    teacher = str(out / "model.keras")
    assert cli.main(["distill", "--train", train, "--test", test, "--teacher", teacher, "--student", "layers:0",
                     "--out", str(folder / "student"), "--epochs", "1", "--batch-size", "8", "--quiet"]) == 0
    student = json.loads((folder / "student" / "metrics.json").read_text())
    assert student["task"] == "files" and student["examples"] == 10 and student["data"]["classes"] == ["ham", "spam"]
    assert student["parameters"] < student["teacher_parameters"]
    assert cli.main(["prune", teacher, "--train", train, "--sparsity", "0.5", "--out", str(folder / "pruned"),
                     "--epochs", "1", "--batch-size", "8", "--quiet"]) == 0
    pruned = json.loads((folder / "pruned" / "metrics.json").read_text())
    assert pruned["split"] == "validation" and pruned["sparsity"]["sparsity"] == pytest.approx(0.5, abs=0.01)


def test_multiple_choice_json_lines_train_evaluate_and_predict(tmp_path, capsys):
    options = ["sat on the mat", "flew to the moon", "see you soon"]
    rows = [{"id": f"q{i}", "context": "the cat", "choices": options[i % 3:] + options[:i % 3],
             "label": "sat on the mat" if i % 2 else (3 - i % 3) % 3} for i in range(18)]
    train = tmp_path / "swag.jsonl"
    train.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    out = tmp_path / "run"
    assert cli.main(["train", "--train", str(train), "--out", str(out), *SMALL, "--packing"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["data"]["task_type"] == "multiple-choice" and "accuracy" in metrics
    assert metrics["settings"]["packing"] is True
    assert kbert.load_model(str(out / "model.keras")).num_choices == 3
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(train)]) == 0
    capsys.readouterr()
    assert cli.main(["predict", str(out / "model.keras"), "--file", str(train)]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [answer["id"] for answer in answers] == [row["id"] for row in rows]
    assert all(len(answer["probabilities"]) == 3 for answer in answers)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "choices": options[:2]}) + "\n")
    assert cli.main(["evaluate", str(out / "model.keras"), "--data", str(bad)]) == 2
    assert "bad.jsonl, line 2: the record has 2 choices where the first has 3" in capsys.readouterr().err


def test_pairs_that_leave_no_room_at_the_sequence_length_are_refused_in_one_line(tmp_path, capsys):
    pairs = write_csv(tmp_path / "pairs.csv", [(HAM[i % 3], SPAM[i % 3], i % 2) for i in range(8)],
                      header=("sentence1", "sentence2", "label"))
    assert cli.main(["train", "--train", pairs, "--out", str(tmp_path / "run"), *SMALL, "--sequence-length", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`sequence_length` 3 leaves no room for 2 texts" in err


def test_lora_fine_tuning_trains_adapters_and_exports_a_plain_model(spam_run, tmp_path, capsys):
    # The base: the encoder of a model fine-tuned before (its .keras file), which the adapters tune further.
    folder, base_run = spam_run
    base = str(base_run / "model.keras")
    out = tmp_path / "lora"
    capsys.readouterr()
    assert cli.main(["train", "--train", str(folder / "train.csv"), "--id-column", "msg_id", "--out", str(out),
                     "--lora-rank", "2", "--lora-targets", "value,query,output", "--encoder", base,
                     *SMALL[2:]]) == 0
    assert f"Saved {out}/model.keras, {out}/model.adapter (the LoRA adapters" in capsys.readouterr().out
    settings = json.loads((out / "metrics.json").read_text())["settings"]
    assert (settings["lora_rank"], settings["lora_alpha"], settings["lora_targets"]) == (2, 2, "query,value,output")
    model = kbert.load_model(out / "model.keras")
    assert model.encoder.lora["targets"] == ["query", "value", "output"]
    assert (out / "model.adapter").stat().st_size < (out / "model.keras").stat().st_size / 2
    # The export folds the adapters in: the SavedModel of the same model fine-tuned in full. The
    # adapter file exports the same, on the base it names: a path, which is read only when given.
    merged = tmp_path / "merged.keras"
    model.merge_lora().save(merged)
    served_folder = str(tmp_path / "served")
    assert cli.main(["export", str(out / "model.adapter"), "--name", "adapter", "--out", served_folder]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"names its base encoder '{base}', which is not a checkpoint kbert knows" in err
    assert cli.main(["export", str(merged), "--name", "merged", "--out", served_folder, "--base", base]) == 2
    assert "--base is for a LoRA adapter file" in capsys.readouterr().err
    for name, path, more in (("lora", out / "model.keras", []), ("merged", merged, []),
                             ("adapter", out / "model.adapter", ["--base", base])):
        assert cli.main(["export", str(path), "--name", name, "--out", served_folder, *more]) == 0
    served = {name: tmp_path / "served" / name / "1" for name in ("lora", "merged", "adapter")}
    import tensorflow as tf

    loaded = {name: tf.saved_model.load(str(path)) for name, path in served.items()}
    stored = {name: tf.train.list_variables(str(path / "variables" / "variables")) for name, path in served.items()}
    assert stored["lora"] == stored["merged"] == stored["adapter"]
    assert not [name for name, _ in stored["lora"] if "lora" in name]
    texts = tf.constant([text for text in SPAM + HAM])
    scores = {name: m.signatures["serving_default"](text=texts)["probabilities"].numpy() for name, m in loaded.items()}
    np.testing.assert_allclose(scores["lora"], scores["merged"], atol=1e-6)
    np.testing.assert_allclose(scores["adapter"], scores["merged"], atol=1e-6)
    np.testing.assert_allclose(scores["lora"], model.predict_proba(SPAM + HAM, verbose=0), atol=1e-5)
    # Scored from the adapter file as from the model file.
    capsys.readouterr()
    for path, more in ((out / "model.keras", []), (out / "model.adapter", ["--base", base])):
        assert cli.main(["evaluate", str(path), "--data", str(folder / "test.csv"), "--id-column", "msg_id",
                         "--out", str(tmp_path / f"{path.name}.json"), *more]) == 0
    assert (json.loads((tmp_path / "model.adapter.json").read_text())
            == json.loads((tmp_path / "model.keras.json").read_text()))
    capsys.readouterr()
    assert cli.main(["train", "--train", str(folder / "train.csv"), "--out", str(tmp_path / "x"),
                     "--lora-alpha", "4", *SMALL]) == 2
    assert "--lora-alpha sets LoRA adapters: give --lora-rank too." in capsys.readouterr().err
