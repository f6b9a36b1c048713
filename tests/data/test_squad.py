import json

import pytest

from kbert.data import (
    SQUAD_EVAL_ARTICLES,
    SQUAD_TRAIN_ARTICLES,
    DataFormatError,
    find_data_file,
    load_squad,
    squad_article_split,
)


def write_squad(path, articles, version="1.1"):
    path.write_text(json.dumps({"version": version, "data": articles}, indent=1), encoding="utf-8")
    return path


def article(title, context, qas):
    return {"title": title, "paragraphs": [{"context": context, "qas": qas}]}


def qa(question_id, question, *answers, **extra):
    return {
        "id": question_id,
        "question": question,
        "answers": [{"text": text, "answer_start": start} for text, start in answers],
        **extra,
    }


def test_real_dev_file_counts():
    records = load_squad()
    raw = json.loads(find_data_file("squad/dev-v1.1.json").read_text("utf-8"))
    # Counted from the JSON itself, independently of the reader.
    expected_questions = sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])
    expected_answers = sum(len(q["answers"]) for a in raw["data"] for p in a["paragraphs"] for q in p["qas"])
    assert len(raw["data"]) == 48
    assert len(records) == expected_questions == 10570
    assert sum(len(r["answers"]) for r in records) == expected_answers == 34726
    assert len({r["context"] for r in records}) == 2067
    assert len({r["id"] for r in records}) == 10570
    assert {r["article"] for r in records} == set(range(48))
    assert not any(r["is_impossible"] for r in records)
    first = records[0]
    assert first["title"] == "Super_Bowl_50" and first["id"] == "56be4db0acb8001400a502ec"
    assert first["question"] == "Which NFL team represented the AFC at Super Bowl 50?"
    assert first["answers"][0] == {"text": "Denver Broncos", "answer_start": 177}
    for record in records:
        for answer in record["answers"]:
            start = answer["answer_start"]
            assert record["context"][start : start + len(answer["text"])] == answer["text"]


def test_article_split_partitions_the_dev_file():
    train_articles, eval_articles = squad_article_split()
    assert (train_articles, eval_articles) == (SQUAD_TRAIN_ARTICLES, SQUAD_EVAL_ARTICLES)
    assert list(train_articles) == list(range(38)) and list(eval_articles) == list(range(38, 48))
    train, evaluation = load_squad(articles=train_articles), load_squad(articles=eval_articles)
    assert (len(train), len(evaluation)) == (8582, 1988)
    assert {r["article"] for r in train} == set(range(38))
    assert not {r["title"] for r in train} & {r["title"] for r in evaluation}
    assert evaluation[0]["title"] == "Intergovernmental_Panel_on_Climate_Change"
    assert load_squad(articles=[47, 0])[0]["title"] == "Force"  # in the order asked


def test_article_outside_the_file_is_named():
    with pytest.raises(ValueError, match=r"Article indices \[48\] are outside .* 48 articles"):
        load_squad(articles=[0, 48])


def test_v2_unanswerable_questions(tmp_path):
    path = write_squad(
        tmp_path / "v2.json",
        [
            article(
                "Cats",
                "The cat sat on the mat.",
                [
                    qa("q1", "Who sat?", ("The cat", 0), is_impossible=False),
                    {**qa("q2", "Who flew?"), "is_impossible": True, "plausible_answers": [{"text": "cat", "answer_start": 4}]},
                ],
            )
        ],
        version="v2.0",
    )
    first, second = load_squad(path)
    assert first["answers"] == [{"text": "The cat", "answer_start": 0}] and not first["is_impossible"]
    assert second["answers"] == [] and second["is_impossible"]


def test_non_ascii_offsets_are_characters(tmp_path):
    context = "Zoë visited 東京 🤗 in été."
    path = write_squad(tmp_path / "s.json", [article("T", context, [qa("q", "Where?", ("東京", 12), ("été", 20))])])
    (record,) = load_squad(path)
    assert [context[a["answer_start"] :][: len(a["text"])] for a in record["answers"]] == ["東京", "été"]


def test_mismatched_answer_names_file_article_and_question(tmp_path):
    articles = [
        article("Good", "A good text.", [qa("ok", "What?", ("good", 2))]),
        article("Bad", "The cat sat.", [qa("bad-id", "Who?", ("dog", 4))]),
    ]
    path = write_squad(tmp_path / "bad.json", articles)
    with pytest.raises(DataFormatError) as error:
        load_squad(path)
    message = str(error.value)
    assert str(path) in message and "article 1 ('Bad')" in message and "'bad-id'" in message
    assert "'dog' at character 4" in message and "'cat'" in message and "strict=False" in message
    # The line is where the question is in the (indented) file.
    lines = path.read_text().splitlines()
    assert '"bad-id"' in lines[error.value.line_number - 1]
    # Only the selected articles are read.
    assert len(load_squad(path, articles=[0])) == 1


def test_lenient_mode_skips_and_reports(tmp_path):
    articles = [
        article(
            "Mixed",
            "The cat sat on the mat.",
            [
                qa("one-bad", "Who?", ("The cat", 0), ("the dog", 0)),
                qa("all-bad", "Where?", ("rug", 19)),
                qa("good", "What?", ("sat", 8)),
            ],
        )
    ]
    path = write_squad(tmp_path / "mixed.json", articles)
    with pytest.warns(UserWarning, match=r"skipped 2 answers .* dropped 1 questions"):
        records = load_squad(path, strict=False)
    assert [r["id"] for r in records] == ["one-bad", "good"]
    assert records[0]["answers"] == [{"text": "The cat", "answer_start": 0}]


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"data":\n' + "[" * 100_000 + "]" * 100_000 + "}", "line 2: JSON nested deeper than 100 levels"),
        ('{"version": "1.1"}', 'a "data" list of articles'),
        ('{"data": [{"title": "T"}]}', "article 0 \\('T'\\): expected 'paragraphs' of type list"),
        ('{"data": [{"title": "T", "paragraphs": [{"qas": []}]}]}', "paragraph 0: expected 'context' of type str"),
        (
            '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x", "answers": []}]}]}]}',
            "question 'x': expected 'question' of type str",
        ),
        (
            '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": '
            '[{"id": "x", "question": "q", "answers": [{"text": "c", "answer_start": "0"}]}]}]}]}',
            "expected 'answer_start' of type int",
        ),
        (
            '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": '
            '[{"id": "x", "question": "q", "answers": []}]}]}]}',
            "no answers, and not marked 'is_impossible'",
        ),
    ],
)
def test_malformed_files_are_named(tmp_path, content, message):
    path = tmp_path / "broken.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_squad(path)


def test_repeated_id_and_bad_encoding(tmp_path):
    articles = [article("T", "a b", [qa("same", "q?", ("a", 0)), qa("same", "q2?", ("b", 2))])]
    with pytest.raises(DataFormatError, match="'same': the id repeats"):
        load_squad(write_squad(tmp_path / "dup.json", articles))
    path = tmp_path / "latin1.json"
    path.write_bytes('{"data": []}\n"caf\xe9"'.encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"line 2: invalid UTF-8"):
        load_squad(path)
