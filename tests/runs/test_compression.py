import json

import pytest

import kbert
import kbert.runs.compression
from kbert import cli
from kbert.runs.compression import _transfer_set, distill_task
from kbert.runs.fine_tuning import DEFAULT_VOCABULARY_CHECKPOINT, load_split, sample_examples
from tests.test_case import TINY_VOCABULARY


def test_the_transfer_set_holds_training_examples_outside_the_labelled_subset():
    texts = [f"text {i}" for i in range(50)]
    labelled, _ = sample_examples(texts, [0] * 50, 20, seed=3)
    transfer = _transfer_set(texts, 50, 20, 10, None, seed=3)
    assert len(transfer) == 10 and not set(transfer) & set(labelled)
    # Pairs keep their two sides together, chosen the same way.
    assert _transfer_set((texts, texts), 50, 20, 10, None, seed=3) == (transfer, transfer)
    assert _transfer_set(texts, 50, None, 10, None, seed=3) == []  # every example is labelled


def test_distilling_a_pair_classifier_with_a_transfer_set_and_layerwise_stage(tmp_path):
    _, tokenizer = kbert.load_pretrained(DEFAULT_VOCABULARY_CHECKPOINT)
    teacher = kbert.classifier("tiny", num_classes=2, vocabulary=tokenizer, sequence_length=32, num_layers=2,
                               hidden_dim=16, num_heads=2, intermediate_dim=32)
    teacher.fit(*sample_examples(*load_split("rte", "train"), 32), epochs=1, verbose=0)
    result = distill_task("rte", teacher, str(tmp_path), student="layers:1", transfer_examples=16,
                          layerwise_epochs=1, epochs=1, max_examples=32, max_eval_examples=16, verbose=0)
    assert result["budget"] == {"labelled_examples": 32, "transfer_examples": 16}
    assert json.loads((tmp_path / "metrics.json").read_text())["examples"] == 16
    student = kbert.load_model(str(tmp_path / "model.keras"))
    assert student.text_pairs and student.encoder.num_layers == 1


@pytest.mark.parametrize("command", ["distill", "prune"])
def test_a_run_stopped_before_its_metrics_leaves_the_earlier_run_whole(tmp_path, capsys, monkeypatch, command):
    teacher = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8,
                               num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32)
    teacher.fit(["the cat", "a dog"], [0, 1], epochs=1, verbose=0)
    teacher.save(str(tmp_path / "teacher.keras"))
    run = tmp_path / "run"
    arguments = {"distill": ["distill", "sst2", "--teacher", str(tmp_path / "teacher.keras"), "--student",
                             "layers:0", "--epochs", "1"],
                 "prune": ["prune", str(tmp_path / "teacher.keras"), "--task", "sst2", "--sparsity", "0.5"],
                 }[command] + ["--max-examples", "8", "--max-eval-examples", "8", "--batch-size", "8", "--quiet",
                               "--out", str(run)]
    assert cli.main([*arguments, "--seed", "0"]) == 0
    finished = {name: (run / name).read_bytes() for name in ("model.keras", "metrics.json")}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the new model is evaluated

    monkeypatch.setattr(kbert.runs.compression, "evaluate_task", interrupted)
    assert cli.main([*arguments, "--seed", "5", "--overwrite"]) == 130
    assert {name: (run / name).read_bytes() for name in finished} == finished
    assert json.loads(finished["metrics.json"])["settings"]["seed"] == 0
    assert not [path.name for path in run.iterdir() if path.name.startswith(".tmp-")]
    capsys.readouterr()
