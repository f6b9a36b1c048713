"""The TensorFlow Datasets source (`source="tfds"`), offline through `tfds.testing.mock_data`.

TFDS's builders for glue, squad and conll2003 give the features and label
names; the mock replaces only the prepared examples, so nothing is
downloaded. Examples are made from rows of the local files, and the TFDS
source must give back what the local readers give for them.
"""

import json
import random

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from kbert import cli
from kbert.data import (
    GLUE_TASKS,
    DataFormatError,
    load_conll2003,
    load_glue,
    load_squad,
)
from kbert.data import glue as glue_module
from kbert.runs.fine_tuning import load_split


def mock_tfds(examples_by_split):
    """TFDS mocked: `tfds.load(name, split)` yields `examples_by_split[split]`, typed by the real builder."""
    requested = []

    def as_dataset(builder, split, **kwargs):
        requested.append((builder.name, str(split)))
        examples = examples_by_split[str(split)]
        return tf.data.Dataset.from_generator(
            lambda: iter(examples), output_signature=builder.info.features.get_tensor_spec()
        )

    return tfds.testing.mock_data(as_dataset_fn=as_dataset), requested


def tfds_label_id(task, label):
    """TFDS's id of kbert's label `label`, by TFDS's own class names."""
    info = GLUE_TASKS[task]
    names = tfds.builder(info.tfds_name).info.features["label"].names
    return names.index(info.tfds_label_names[label])


def glue_as_tfds(task, texts, labels, count=6):
    """The first `count` rows as TFDS glue examples, shuffled, with GLUE's trailing spaces."""
    info = GLUE_TASKS[task]
    columns = texts if info.is_pair else (texts,)
    examples = []
    for index in range(count):
        example = {name: column[index] + " " for name, column in zip(info.tfds_text_features, columns)}
        example["label"] = -1 if labels is None else tfds_label_id(task, labels[index])
        example["idx"] = index
        examples.append(example)
    random.Random(0).shuffle(examples)  # TFDS stores a prepared split shuffled
    return examples


def first(texts, labels, task, count=6):
    if GLUE_TASKS[task].is_pair:
        texts = tuple(column[:count] for column in texts)
    else:
        texts = texts[:count]
    return texts, None if labels is None else labels[:count]


@pytest.mark.parametrize("task", ["sst2", "rte", "mrpc"])
def test_glue_from_tfds_equals_the_local_reader(task):
    texts, labels = load_glue(task, "dev")
    assert set(labels[:6]) == {0, 1}  # both classes among the rows used
    mock, requested = mock_tfds({"validation": glue_as_tfds(task, texts, labels)})
    with mock:
        from_tfds = load_glue(task, "dev", source="tfds")
    assert requested == [(GLUE_TASKS[task].tfds_name.split("/")[0], "validation")]
    assert from_tfds == first(texts, labels, task)


def test_sst2_example_and_label_come_out_as_the_file_gives_them():
    mock, _ = mock_tfds({"train": [
        {"sentence": "a gorgeous , witty , seductive movie . ", "label": 1, "idx": 1},
        {"sentence": "it 's a bad sign . ", "label": 0, "idx": 0},
    ]})
    with mock:
        texts, labels = load_glue("sst2", "train", source="tfds")
    assert texts == ["it 's a bad sign .", "a gorgeous , witty , seductive movie ."]
    assert [GLUE_TASKS["sst2"].label_names[label] for label in labels] == ["negative", "positive"]


def test_glue_labels_are_mapped_by_name(monkeypatch):
    """Were TFDS to list MRPC's classes the other way round, kbert's ids would not change."""
    monkeypatch.setattr(glue_module, "class_names", lambda info, feature: ["equivalent", "not_equivalent"])
    mock, _ = mock_tfds({"train": [
        {"sentence1": "a", "sentence2": "b", "label": 0, "idx": 0},  # 0 is now "equivalent"
        {"sentence1": "c", "sentence2": "d", "label": 1, "idx": 1},
    ]})
    with mock:
        _, labels = load_glue("mrpc", "train", source="tfds")
    assert [GLUE_TASKS["mrpc"].label_names[label] for label in labels] == ["paraphrase", "not_paraphrase"]


def test_glue_test_split_has_no_labels_and_a_labelled_split_needs_them():
    texts, _ = load_glue("rte", "test")
    mock, _ = mock_tfds({"test": glue_as_tfds("rte", texts, None), "train": glue_as_tfds("rte", texts, None)})
    with mock:
        assert load_glue("rte", "test", source="tfds") == first(texts, None, "rte")
        with pytest.raises(DataFormatError, match=r"TFDS glue/rte, split 'train': 6 examples have no label"):
            load_glue("rte", "train", source="tfds")


def test_random_tfds_examples_have_the_readers_structure():
    """tfds.testing's own random examples of the real glue/rte builder read as pairs and 0/1 labels."""
    with tfds.testing.mock_data(num_examples=4):
        (premises, hypotheses), labels = load_glue("rte", "dev", source="tfds")
    assert len(premises) == len(hypotheses) == len(labels) == 4
    assert all(isinstance(text, str) for text in premises + hypotheses)
    assert set(labels) <= {0, 1}


def squad_as_tfds(records):
    return [
        {
            "id": record["id"],
            "title": record["title"],
            "context": record["context"],
            "question": record["question"],
            "answers": {
                "text": [answer["text"] for answer in record["answers"]],
                "answer_start": [answer["answer_start"] for answer in record["answers"]],
            },
        }
        for record in records
    ]


def test_squad_from_tfds_equals_the_local_reader():
    local = load_squad(articles=[1, 0])
    picked = local[:3] + local[-3:]  # three questions of article 1, three of article 0
    examples = squad_as_tfds(picked)
    random.Random(1).shuffle(examples)
    mock, requested = mock_tfds({"validation": examples})
    with mock:
        records = load_squad(source="tfds")
    assert requested == [("squad", "validation")]
    by_id = {record["id"]: record for record in records}
    assert sorted(by_id) == sorted(record["id"] for record in picked)
    for record in picked:
        ours = by_id[record["id"]]
        assert {**ours, "article": None} == {**record, "article": None}
    # Articles are numbered by first appearance, and each article's questions are together.
    first_title = examples[0]["title"]
    assert [r["article"] for r in records] == [0, 0, 0, 1, 1, 1]
    assert records[0]["title"] == first_title


def test_squad_from_tfds_checks_answers_against_contexts():
    record = load_squad(articles=[0])[0]
    broken = squad_as_tfds([record])
    broken[0]["answers"]["answer_start"] = [start + 1 for start in broken[0]["answers"]["answer_start"]]
    mock, _ = mock_tfds({"train": broken})
    with mock:
        expected = rf"TFDS squad/v1.1, split 'train': .*{record['id']}.*does not match"
        with pytest.raises(DataFormatError, match=expected):
            load_squad(source="tfds", split="train")
        with pytest.warns(UserWarning, match="dropped 1 questions"):
            assert load_squad(source="tfds", split="train", strict=False) == []


def test_squad_arguments_of_the_other_source_are_refused():
    with pytest.raises(ValueError, match="source='tfds' takes a `split`"):
        load_squad(articles=[0], source="tfds")
    with pytest.raises(ValueError, match="`split` selects a TFDS split"):
        load_squad(split="train")
    with pytest.raises(ValueError, match="Unknown SQuAD split 'test'"):
        load_squad(source="tfds", split="test")
    with pytest.raises(ValueError, match="Unknown data source 'hub'"):
        load_glue("sst2", "dev", source="hub")


def test_conll2003_from_tfds_equals_the_local_reader_and_repairs_iob1():
    sentences, tags = load_conll2003("test")
    names = tfds.builder("conll2003").info.features["ner"].feature.names
    examples = [
        {"tokens": words, "pos": [0] * len(words), "chunks": [0] * len(words),
         "ner": [names.index(tag) for tag in sentence_tags]}
        for words, sentence_tags in zip(sentences[:4], tags[:4])
    ]
    # An IOB1 sentence: an entity that starts with I-.
    examples.append({"tokens": ["Peter", "Blackburn", "said"], "pos": [0] * 3, "chunks": [0] * 3,
                     "ner": [names.index("I-PER"), names.index("I-PER"), names.index("O")]})
    mock, requested = mock_tfds({"test": examples})
    with mock:
        from_tfds = load_conll2003("test", source="tfds")
    assert requested == [("conll2003", "test")]
    assert from_tfds == (sentences[:4] + [["Peter", "Blackburn", "said"]],
                         tags[:4] + [["B-PER", "I-PER", "O"]])


def test_load_split_reads_tfds_for_the_tasks_that_have_it():
    texts, labels = load_glue("sst2", "dev")
    records = load_squad(articles=[0])[:2]
    mock, requested = mock_tfds({
        "validation": glue_as_tfds("sst2", texts, labels, 8),
        "train": squad_as_tfds(records),
    })
    with mock:
        assert load_split("sst2", "dev", source="tfds") == first(texts, labels, "sst2", 8)
        # SQuAD trains on TFDS's train split (not on articles of dev).
        x, y = load_split("squad", "train", source="tfds")
    assert [r["id"] for r in x] == [r["id"] for r in records] and y is None
    assert requested == [("glue", "validation"), ("squad", "train")]
    with pytest.raises(ValueError, match="'sick' has no TFDS source"):
        load_split("sick", "train", source="tfds")


def test_cli_train_passes_the_source(tmp_path, monkeypatch, capsys):
    from kbert.runs import fine_tuning

    seen = {}

    def fake_fine_tune(task, out, settings):
        seen.update(task=task, source=settings.source)
        return {"task": task, "split": "dev", "examples": 0}

    monkeypatch.setattr(fine_tuning, "fine_tune", fake_fine_tune)
    assert cli.main(["train", "mrpc", "--source", "tfds", "--out", str(tmp_path)]) == 0
    assert seen["task"] == "mrpc" and seen["source"] == "tfds"
    assert cli.main(["train", "mrpc", "--out", str(tmp_path)]) == 0
    assert seen["source"] == "local"


# The model is saved unfitted, so its optimizer has no state to restore.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_cli_evaluate_reads_tfds(tmp_path, capsys):
    import kbert
    from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

    texts, labels = load_glue("sst2", "dev")
    model = kbert.classifier(kbert.Encoder(**tiny_encoder_kwargs()), num_classes=2,
                             vocabulary=TINY_VOCABULARY, sequence_length=16)
    model.save(str(tmp_path / "model.keras"))
    mock, requested = mock_tfds({"validation": glue_as_tfds("sst2", texts, labels, 8)})
    with mock:
        assert cli.main(["evaluate", str(tmp_path / "model.keras"), "--task", "sst2", "--source", "tfds",
                         "--out", str(tmp_path / "eval.json")]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["source"] == "tfds" and report["split"] == "dev" and report["examples"] == 8
    assert sum(map(sum, report["confusion_matrix"])) == 8
    assert requested == [("glue", "validation")]
