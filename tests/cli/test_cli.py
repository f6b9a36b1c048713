import pytest

import kbert
from kbert import cli
from kbert.runs.pretraining import PRETRAIN_FILL_MASK_SENTENCES
from tests.callbacks.event_files import scalars, texts
from tests.pretraining.pretraining_run import VOCABULARY, write_corpus
from tests.test_case import run_cli_process


def test_presets_lists_the_paper_parameter_counts(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "109,482,240" in out and "335,141,888" in out and "4,385,920" in out
    albert_base = next(line for line in out.splitlines() if line.startswith("albert-base "))
    assert albert_base.split()[1:] == ["12", "768", "12", "3072", "128", "yes", "11,750,400"]


def test_presets_counts_a_chosen_vocabulary(capsys):
    assert cli.main(["presets", "--vocabulary-size", "30000"]) == 0
    out = capsys.readouterr().out
    # The published ALBERT models' counts (keras-hub's presets record the same).
    assert all(count in out for count in ["11,683,584", "17,683,968", "58,724,864", "222,595,584"])


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
    assert "matches no file" in capsys.readouterr().err
    assert not (tmp_path / "v.txt").exists()


def pretrain_arguments(corpus, out):
    return ["pretrain", "--corpus", str(corpus / "*.txt"), "--out", str(out), "--preset", "tiny",
            "--vocabulary-size", "60", "--sequence-length", "32", "--batch-size", "8", "--quiet"]


def test_pretrain_writes_a_run_folder_that_fill_mask_reads(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=4, sentences=20)
    out = tmp_path / "run"
    assert cli.main(pretrain_arguments(tmp_path / "corpus", out) + ["--attention-dropout", "0.05"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints", "pretrainer.keras", "settings.json", "tensorboard", "vocab.txt"
    ]
    assert (out / "checkpoints" / "epoch-001.keras").exists()
    vocabulary = (out / "vocab.txt").read_text().splitlines()
    assert vocabulary[:5] == list(kbert.SPECIAL_TOKENS)
    pretrainer = kbert.load_model(str(out / "pretrainer.keras"))
    assert pretrainer.encoder.vocabulary_size == len(vocabulary)
    assert (pretrainer.encoder.attention_dropout, pretrainer.encoder.dropout) == (0.05, 0.1)
    assert int(pretrainer.optimizer.iterations.numpy()) > 0
    # TensorBoard: the epoch's curves whatever its step count, the fill-mask guesses at the end.
    train_logs = out / "tensorboard" / "train"
    assert sorted(scalars(train_logs)["epoch/pretraining_loss"]) == [0]
    steps = int(pretrainer.optimizer.iterations.numpy())
    table = texts(train_logs)["fill_mask"][steps]
    assert table[1:, 0].tolist() == list(PRETRAIN_FILL_MASK_SENTENCES)
    capsys.readouterr()

    assert cli.main(["fill-mask", str(out), "the [MASK] sat on the mat .", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "the [MASK] sat on the mat ."
    assert lines[1].startswith("  [MASK] 1: ") and len(lines[1].split()) == 2 + 2 * 3


def test_a_healthy_run_logged_to_a_file_reads_clean(tmp_path):
    # As a user runs it: `kbert pretrain ... > log 2>&1`, on a one-book corpus.
    import os
    import re
    import subprocess
    import sys

    write_corpus(tmp_path / "corpus", documents=1, sentences=20)
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    with open(tmp_path / "log", "w") as log:
        arguments = pretrain_arguments(tmp_path / "corpus", tmp_path / "run")[:-1]  # no --quiet
        subprocess.run([sys.executable, "-m", "kbert.cli", *arguments, "--steps-per-epoch", "6"],
                       stdout=log, stderr=subprocess.STDOUT, env=environment, timeout=300, check=True)
    text = (tmp_path / "log").read_text()
    lines = text.splitlines()
    # Nothing from TensorFlow's C++ log (I/W/E lines, absl's banner), no escape codes or redraws.
    assert not [line for line in lines if re.match(r"[IWEF]\d{4} |WARNING: All log messages", line)], text
    assert not re.search(r"[\x1b\r\b]", text)
    # kbert's warnings in one line, without Python's source path; the repeated examples said.
    assert "UserWarning" not in text and ".py:" not in text
    assert sum(line.startswith("kbert pretrain: warning: The corpus is one document") for line in lines) == 1
    assert [line for line in lines if line.startswith("kbert pretrain: note: the corpus gives ")]
    assert [line for line in lines if re.match(r"6/6 - \d+s - .*loss: ", line)]


# A tiny ALBERT: the tiny preset's sizes, factorized embeddings, one shared block.
TINY_ALBERT = ["--embedding-size", "32", "--num-groups", "1"]


def test_pretrain_sop_on_a_tiny_albert_with_ngram_masking(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=2, sentences=20)
    out = tmp_path / "run"
    out.mkdir()
    (out / ".tmp-0badc0de-pretrainer.keras").write_bytes(b"half a model")  # of a save killed midway
    (out / ".tmp-notes.txt").write_text("a user's file\n")
    assert cli.main(pretrain_arguments(tmp_path / "corpus", out) + TINY_ALBERT + [
        "--objective", "sop", "--max-ngram", "3", "--steps-per-epoch", "3"]) == 0
    assert (f"{out}: removed {out / '.tmp-0badc0de-pretrainer.keras'}, a partial file of an earlier run that "
            "was interrupted.") in capsys.readouterr().err
    assert sorted(path.name for path in out.iterdir() if path.name.startswith(".")) == [".tmp-notes.txt"]
    pretrainer = kbert.load_model(str(out / "pretrainer.keras"))
    assert pretrainer.objective == "sop" and set(pretrainer.output_names) == {"mlm", "sop"}
    encoder = pretrainer.encoder
    assert (encoder.embedding_size, encoder.hidden_dim, encoder.num_groups) == (32, 128, 1)
    assert len(encoder.transformer_layers) == 1
    # TensorBoard has the SOP curves where NSP's would be, and the loss on a
    # card of its own, apart from fine-tuning runs' `epoch/loss`.
    logged = scalars(out / "tensorboard" / "train")
    for name in ("epoch/sop_loss", "epoch/sop_accuracy", "epoch/mlm_loss", "epoch/pretraining_loss"):
        assert sorted(logged[name]) == [0], name
    assert not any("nsp" in name for name in logged)
    assert "epoch/loss" not in logged
    assert 0 <= logged["epoch/sop_accuracy"][0] <= 1


def test_pretrain_reads_prepared_shards_and_refuses_another_objective(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=2, sentences=10)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    prepared = tmp_path / "prepared"
    assert cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"),
                     "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(prepared),
                     "--sequence-length", "32", "--objective", "sop"]) == 0
    capsys.readouterr()

    def pretrain(*extra):
        return cli.main(["pretrain", "--corpus", str(prepared), "--out", str(tmp_path / "run"),
                         "--preset", "tiny", "--batch-size", "8", "--steps-per-epoch", "2", "--quiet",
                         *TINY_ALBERT, *extra])

    assert pretrain("--objective", "nsp") == 2
    err = capsys.readouterr().err
    assert "prepared for objective='sop'; got objective='nsp'" in err
    assert pretrain("--no-next-sentence") == 2
    assert "got objective='none'" in capsys.readouterr().err
    # Without --objective, the folder's own: SOP, with its vocabulary and length.
    assert pretrain() == 0
    pretrainer = kbert.load_model(str(tmp_path / "run" / "pretrainer.keras"))
    assert pretrainer.objective == "sop" and pretrainer.encoder.vocabulary_size == len(VOCABULARY)
    assert (tmp_path / "run" / "vocab.txt").read_text().splitlines() == VOCABULARY


def test_pretrain_reports_a_corpus_that_matches_nothing(tmp_path, capsys):
    assert cli.main(pretrain_arguments(tmp_path / "missing", tmp_path / "run")) == 2
    assert "matches no file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["pretrain", "train"])
def test_a_worker_whose_peers_never_start_stops_with_a_clear_error(tmp_path, capsys, monkeypatch,
                                                                   command):
    from tests.backend.test_distribute import free_ports, tf_config

    ports = free_ports(2)
    # TF_CONFIG alone makes the command a worker; worker 0 never starts.
    monkeypatch.setenv("TF_CONFIG", tf_config(ports, 1))
    arguments = ["--corpus", "x.txt"] if command == "pretrain" else ["sst2"]
    assert cli.main([command, *arguments, "--out", str(tmp_path), "--connect-timeout", "1"]) == 2
    assert f"No answer within 1 s from worker 0 at 127.0.0.1:{ports[0]}" in capsys.readouterr().err


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
    # The command's flag, not the library's keyword argument.
    err = capsys.readouterr().err
    assert "exists; pass --overwrite to replace it" in err and "overwrite=True" not in err
    assert cli.main(arguments + ["--overwrite"]) == 0


def test_prepare_pretraining_shows_plain_progress_when_not_on_a_terminal(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", documents=3, sentences=10)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    assert cli.main(["prepare-pretraining", "--corpus", str(tmp_path / "corpus" / "*.txt"),
                     "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(tmp_path / "prepared"),
                     "--sequence-length", "32", "--examples-per-shard", "5"]) == 0
    captured = capsys.readouterr()
    shards = int(captured.out.split(" shard(s)")[0].rsplit(" ", 1)[-1])
    assert shards > 2
    # capsys is no terminal: whole lines, no escape codes or carriage returns.
    assert "\x1b[" not in captured.err and "\r" not in captured.err
    progress = [line for line in captured.err.splitlines() if line.startswith("Reading the corpus")]
    # A line at each completed shard, and a last one with the totals.
    assert len(progress) == shards
    assert progress[-1].startswith("Reading the corpus: 3/3 file(s), 3 documents, ")
    assert f", {shards} shard(s) (" in progress[-1]
    counts = [int(line.split(" pairs")[0].rsplit(" ", 1)[-1].replace(",", "")) for line in progress]
    assert counts == sorted(counts) and counts[0] == 5


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
                     "--attention-dropout", "0", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "model.keras", "tensorboard"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["attention_dropout"] == 0.0
    assert metrics["task"] == "rte" and metrics["split"] == "dev" and metrics["examples"] == 40
    assert metrics["train_examples"] == 64 and 0 <= metrics["accuracy"] <= 1
    assert sum(map(sum, metrics["confusion_matrix"])) == 40
    printed = capsys.readouterr().out
    assert "accuracy" in printed and metrics["positive_class"] == "entailment"
    assert "  f1 (entailment) " in printed  # RTE's precision, recall and F1 are of its class 0
    # TensorBoard on the folder of the runs, to compare this one with the others.
    assert printed.splitlines()[-1].endswith(f"tensorboard --logdir {tmp_path}")

    report = tmp_path / "eval.json"
    assert cli.main(["evaluate", str(out / "model.keras"), "--task", "rte", "--max-examples", "40",
                     "--out", str(report)]) == 0
    # The saved model scores the same examples the same way.
    assert json.loads(report.read_text())["accuracy"] == metrics["accuracy"]
    encoder = kbert.load_model(str(out / "model.keras")).encoder
    assert (encoder.attention_dropout, encoder.dropout) == (0.0, 0.1)


def test_train_explains_a_bad_encoder(tmp_path, capsys):
    assert cli.main(["train", "sst2", "--encoder", str(tmp_path / "nothing"), "--out",
                     str(tmp_path / "runs" / "run")]) == 2
    assert "Unknown preset" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # the folders it made for the run, empty, are gone


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
    err = capsys.readouterr().err
    assert "exists; choose another --version, or pass --overwrite" in err and "overwrite=True" not in err
    assert cli.main(["predict", out + "/spam", "the cat", "a dog"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all('"labels"' in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("model", [[], ["--objective", "sop", *TINY_ALBERT]], ids=["bert-nsp", "albert-sop"])
def test_pretrain_killed_after_a_backup_resumes_exactly(tmp_path, model):
    import json
    import signal

    import numpy as np

    write_corpus(tmp_path / "corpus", documents=4, sentences=20)
    # The tiny preset has dropout: the resumed run must draw the same masks.

    def arguments(out):
        return pretrain_arguments(tmp_path / "corpus", tmp_path / out) + model + [
            "--steps-per-epoch", "30", "--epochs", "2", "--backup-every", "10"]

    killed = run_cli_process(*arguments("run"), kill_at_step=53)
    assert killed.returncode == -signal.SIGKILL
    backup = json.loads((tmp_path / "run" / "backup" / "training_metadata.json").read_text())
    assert (backup["step"], backup["epoch"], backup["batches_done"]) == (50, 1, 20)

    resumed = run_cli_process(*arguments("run"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count("Resuming from the backup") == 1
    assert "at step 50 (epoch 2, 20 batch(es) into it)." in resumed.stdout
    straight = run_cli_process(*arguments("straight"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "Resuming" not in straight.stdout

    models = [kbert.load_model(str(tmp_path / name / "pretrainer.keras")) for name in ("run", "straight")]
    # 60 steps, as asked (not 50 + another 30), with the same weights to the bit.
    assert [int(m.optimizer.iterations.numpy()) for m in models] == [60, 60]
    for a, b in zip(*(m.get_weights() for m in models)):
        np.testing.assert_array_equal(a, b)


def all_actions(parser):
    """`(command, action)` for every option and argument of the parser and its commands."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {action_name}", sub_action)
                            for action_name, sub_action in all_actions(sub))
        else:
            yield "", action


def test_every_option_of_every_command_has_help():
    parser = cli.build_parser()
    actions = list(all_actions(parser))
    assert len(actions) > 80
    missing = [(command, action.dest) for command, action in actions if not action.help]
    assert missing == []
    commands = next(a for a in parser._actions if a.choices and "pretrain" in a.choices)
    assert all(choice.help for choice in commands._choices_actions)


def test_help_shows_defaults():
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["pretrain"].format_help()
    assert "(default: 500)" in help_text and "(default: mini)" in help_text


def test_help_is_instant_and_loads_no_tensorflow():
    import subprocess
    import sys
    import time

    # As the `kbert` console script runs it: argv[0] is the script, then `from kbert.cli import main`.
    code = ("import sys; sys.argv[0] = '/usr/local/bin/kbert'; from kbert.cli import main, build_parser\n"
            "for command in [[], *[[name] for name in build_parser()._subparsers._group_actions[0].choices]]:\n"
            "    try:\n"
            "        main([*command, '--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'keras_hub'))\n"
            "print('heavy modules:', heavy[:3])\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert "heavy modules: []" in result.stdout
    assert "usage: kbert [-h] COMMAND" in result.stdout and "usage: kbert pretrain" in result.stdout
    # No TensorFlow, absl, oneDNN or CUDA log lines: nothing at all on stderr.
    assert result.stderr == ""
    assert elapsed < 2.0, elapsed


def test_import_kbert_registers_its_classes_with_keras(tmp_path):
    import subprocess
    import sys

    import kbert
    from tests.test_case import TINY_VOCABULARY

    path = str(tmp_path / "model.keras")
    kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8, num_layers=1).save(path)
    # A program (not the `kbert` command) that imports kbert, then loads with Keras alone.
    code = f"import kbert, keras; print(type(keras.saving.load_model({path!r})).__name__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "Classifier"


def test_errors_name_the_command_flags_not_python_arguments(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\n")
    assert cli.main(["vocabulary", str(corpus), "--size", "3", "--out", str(tmp_path / "v.txt")]) == 2
    err = capsys.readouterr().err
    assert "--size must exceed 5" in err and "vocabulary_size" not in err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--batch-size", "0"])
    assert exit_.value.code == 2
    assert "argument --batch-size: must be an integer of at least 1, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "sst2", "--out", str(tmp_path / "run"), "--attention-dropout", "1"])
    assert exit_.value.code == 2
    assert "argument --attention-dropout: must be a number from 0 up to, not including, 1, got '1'" \
        in capsys.readouterr().err


def test_distill_then_prune_then_export_a_student(tmp_path, capsys):
    """The compression loop from the command line: teacher, distilled student, pruned, served."""
    import json

    from kbert.data.paths import data_dir

    teacher = tmp_path / "teacher"
    assert cli.main(["train", "sms_spam", "--encoder", "tiny", "--out", str(teacher), "--epochs", "1",
                     "--max-examples", "64", "--max-eval-examples", "40", "--sequence-length", "32",
                     "--quiet"]) == 0
    student = tmp_path / "student"
    corpus = str(data_dir() / "wikitext-2-raw" / "wiki.valid.raw")
    assert cli.main(["distill", "sms_spam", "--teacher", str(teacher / "model.keras"), "--student",
                     "layers:1", "--out", str(student), "--max-examples", "48", "--transfer-examples",
                     "16", "--general-corpus", corpus, "--general-steps", "3", "--epochs", "1",
                     "--max-eval-examples", "40", "--quiet"]) == 0
    metrics = json.loads((student / "metrics.json").read_text())
    assert metrics["budget"] == {"labelled_examples": 48, "transfer_examples": 16,
                                 "general_texts": metrics["budget"]["general_texts"]}
    assert metrics["examples"] == 40 and metrics["parameters"] < metrics["teacher_parameters"]
    assert kbert.load_model(str(student / "model.keras")).encoder.num_layers == 1
    logged = scalars(student / "tensorboard" / "distill" / "train")
    assert {"epoch/label_loss", "epoch/distillation_loss"} <= set(logged)
    assert "parameters" in capsys.readouterr().out

    pruned = tmp_path / "pruned"
    assert cli.main(["prune", str(teacher / "model.keras"), "--task", "sms_spam", "--out", str(pruned),
                     "--sparsity", "0.5", "--heads", "0.5", "--max-examples", "48",
                     "--max-eval-examples", "40", "--quiet"]) == 0
    metrics = json.loads((pruned / "metrics.json").read_text())
    assert metrics["parameters"] < metrics["parameters_before"]
    assert metrics["sparsity"]["sparsity"] == pytest.approx(0.5, abs=0.01)
    assert "weight sparsity  0.5" in capsys.readouterr().out

    out = str(tmp_path / "saved_models")
    for name, run in [("student", student), ("pruned", pruned)]:
        assert cli.main(["export", str(run / "model.keras"), "--name", name, "--out", out]) == 0
        assert cli.main(["predict", f"{out}/{name}", "WIN a free prize now", "see you at 5"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()[-2:]
        assert all('"labels"' in line for line in lines)


def test_distill_and_prune_explain_bad_arguments(tmp_path, capsys):
    model = kbert.classifier("tiny", num_classes=2, vocabulary=VOCABULARY, sequence_length=16,
                             num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    path = str(tmp_path / "teacher.keras")
    model.save(path)
    out = str(tmp_path / "run")
    assert cli.main(["distill", "sst2", "--teacher", path, "--student", "huge", "--out", out]) == 2
    assert "Unknown student 'huge'" in capsys.readouterr().err
    assert cli.main(["distill", "sst2", "--teacher", path, "--student", "layers:0,x", "--out", out]) == 2
    assert "layers:0,2,4" in capsys.readouterr().err
    assert cli.main(["distill", "sst2", "--teacher", path, "--general-steps", "2", "--out", out]) == 2
    assert "--general-corpus" in capsys.readouterr().err
    assert cli.main(["prune", path, "--task", "sst2", "--out", out]) == 2
    assert "Nothing to prune" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["prune", path, "--task", "sst2", "--heads", "1", "--out", out])
    assert "argument --heads: must be a number from 0 up to, not including, 1" in capsys.readouterr().err


def test_pretrain_learns_its_vocabulary_from_a_corpus_folder(tmp_path):
    import argparse

    from kbert.runs.pretraining import _read_or_learn_vocabulary

    (tmp_path / "books" / "part").mkdir(parents=True)
    (tmp_path / "books" / "one.txt").write_text("the cat sat on the mat\n")
    (tmp_path / "books" / "part" / "two.txt").write_text("a dog slept in the garden\n")
    args = argparse.Namespace(vocabulary=None, corpus=[str(tmp_path / "books")], vocabulary_size=60, cased=False)
    vocabulary = _read_or_learn_vocabulary(args, tmp_path / "run")
    assert {"cat", "garden"} <= set(vocabulary)
