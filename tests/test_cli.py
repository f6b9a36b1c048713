import kbert
from kbert import cli
from tests.callbacks.event_files import scalars, texts
from tests.models.pretraining_run import VOCABULARY, write_corpus


def test_presets_lists_the_paper_parameter_counts(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "109,482,240" in out and "335,141,888" in out and "4,385,920" in out


def test_vocabulary_learns_from_files(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = tmp_path / "vocab.txt"
    assert cli.main(["vocabulary", str(tmp_path / "*.txt"), "--size", "60", "--out", str(out)]) == 0
    tokens = out.read_text().splitlines()
    assert tokens[:5] == list(kbert.SPECIAL_TOKENS)
    assert {"the", "cat", "sat"} <= set(tokens)
    assert not (tmp_path / "vocab.txt.tmp").exists()


def test_vocabulary_reports_a_missing_file(tmp_path, capsys):
    assert cli.main(["vocabulary", str(tmp_path / "none*.txt"), "--out", str(tmp_path / "v.txt")]) == 2
    assert "No file matches" in capsys.readouterr().err
    assert not (tmp_path / "v.txt").exists()


def pretrain_arguments(corpus, out):
    return ["pretrain", "--corpus", str(corpus / "*.txt"), "--out", str(out), "--preset", "tiny",
            "--vocabulary-size", "60", "--sequence-length", "32", "--batch-size", "8", "--quiet"]


def test_pretrain_writes_a_run_folder_that_fill_mask_reads(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=4, sentences=20)
    out = tmp_path / "run"
    assert cli.main(pretrain_arguments(tmp_path / "corpus", out)) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints", "pretrainer.keras", "tensorboard", "vocab.txt"
    ]
    assert (out / "checkpoints" / "epoch-001.keras").exists()
    vocabulary = (out / "vocab.txt").read_text().splitlines()
    assert vocabulary[:5] == list(kbert.SPECIAL_TOKENS)
    pretrainer = kbert.load_model(str(out / "pretrainer.keras"))
    assert pretrainer.encoder.vocabulary_size == len(vocabulary)
    assert int(pretrainer.optimizer.iterations.numpy()) > 0
    # TensorBoard: the epoch's curves whatever its step count, the fill-mask guesses at the end.
    train_logs = out / "tensorboard" / "train"
    assert sorted(scalars(train_logs)["epoch_loss"]) == [0]
    steps = int(pretrainer.optimizer.iterations.numpy())
    table = texts(train_logs)["fill_mask"][steps]
    assert table[1:, 0].tolist() == list(cli.PRETRAIN_FILL_MASK_SENTENCES)
    capsys.readouterr()

    assert cli.main(["fill-mask", str(out), "the [MASK] sat on the mat .", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "the [MASK] sat on the mat ."
    assert lines[1].startswith("  [MASK] 1: ") and len(lines[1].split()) == 2 + 2 * 3


def test_pretrain_reports_a_corpus_that_matches_nothing(tmp_path, capsys):
    assert cli.main(pretrain_arguments(tmp_path / "missing", tmp_path / "run")) == 2
    assert "No file matches" in capsys.readouterr().err


def test_prepare_pretraining_writes_shards_once(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=3, sentences=10)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    arguments = ["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"),
                 "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared"),
                 "--sequence-length", "32"]
    assert cli.main(arguments) == 0
    assert "segment pairs in 1 shard(s)" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "prepared").iterdir())
    assert names == ["metadata.json", "pairs-00000.tfrecord", "vocab.txt"]
    assert cli.main(arguments) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(arguments + ["--overwrite"]) == 0


def test_fill_mask_needs_a_vocabulary(tmp_path, capsys):
    (tmp_path / "model.keras").write_text("")
    assert cli.main(["fill-mask", str(tmp_path / "model.keras"), "a [MASK]"]) == 2
    assert "--vocabulary" in capsys.readouterr().err


def test_fill_mask_reads_a_published_checkpoint_folder(tmp_path, capsys):
    from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

    pretrainer = kbert.Pretrainer(kbert.Encoder(**tiny_encoder_kwargs()))
    folder = kbert.save_pretrained(pretrainer, kbert.Tokenizer(TINY_VOCABULARY), tmp_path / "bert")
    assert cli.main(["fill-mask", folder, "the cat [MASK] on the mat .", "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "the cat [MASK] on the mat ."
    assert lines[1].startswith("  [MASK] 1: ") and len(lines[1].split()) == 2 + 2 * 2


def test_fill_mask_explains_a_checkpoint_without_a_masked_lm_head(capsys):
    assert cli.main(["fill-mask", "all-minilm-l6-v2", "a [MASK] day"]) == 2
    assert "no masked-LM head" in capsys.readouterr().err


def test_train_then_evaluate_a_task(tmp_path, capsys):
    import json

    out = tmp_path / "run"
    assert cli.main(["train", "rte", "--encoder", "tiny", "--out", str(out), "--epochs", "1",
                     "--max-examples", "64", "--max-eval-examples", "40", "--sequence-length", "32",
                     "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "model.keras", "tensorboard"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "rte" and metrics["split"] == "dev" and metrics["examples"] == 40
    assert metrics["train_examples"] == 64 and 0 <= metrics["accuracy"] <= 1
    assert sum(map(sum, metrics["confusion_matrix"])) == 40
    assert "accuracy" in capsys.readouterr().out

    report = tmp_path / "eval.json"
    assert cli.main(["evaluate", str(out / "model.keras"), "--task", "rte", "--max-examples", "40",
                     "--out", str(report)]) == 0
    # The saved model scores the same examples the same way.
    assert json.loads(report.read_text())["accuracy"] == metrics["accuracy"]


def test_train_explains_a_bad_encoder(tmp_path, capsys):
    assert cli.main(["train", "sst2", "--encoder", str(tmp_path / "nothing"), "--out",
                     str(tmp_path / "run")]) == 2
    assert "Unknown preset" in capsys.readouterr().err


def test_export_writes_versions_that_predict_reads(tmp_path, capsys):
    model = kbert.classifier("tiny", num_classes=2, vocabulary=VOCABULARY, sequence_length=16,
                             class_names=["ham", "spam"], num_layers=1, hidden_dim=16, num_heads=2,
                             intermediate_dim=32)
    model.fit(["the cat", "a dog"], [0, 1], epochs=1, verbose=0)
    model.save(str(tmp_path / "spam.keras"))
    out = str(tmp_path / "saved_models")
    assert cli.main(["export", str(tmp_path / "spam.keras"), "--name", "spam", "--out", out]) == 0
    assert "saved_models/spam/1" in capsys.readouterr().out
    assert cli.main(["export", str(tmp_path / "spam.keras"), "--name", "spam", "--out", out, "--version", "1"]) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(["predict", out + "/spam", "the cat", "a dog"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all('"labels"' in line for line in lines)
