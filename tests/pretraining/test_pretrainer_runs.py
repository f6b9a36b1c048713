"""Whole pretraining runs in their own processes: killed and resumed, and on two devices."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import pretraining_run  # noqa: E402

SCRIPT = Path(__file__).parent / "pretraining_run.py"
pytestmark = pytest.mark.slow


def run(tmp_path, name, *arguments):
    out = tmp_path / f"{name}.npz"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--corpus", str(tmp_path / "corpus"),
         "--logdir", str(tmp_path / name), "--out", str(out), *arguments],
        capture_output=True, text=True, timeout=300,
    )
    return result, out


def load(out):
    weights = np.load(out)
    summary = json.loads(out.with_suffix(".json").read_text())
    return [weights[key] for key in weights.files], summary


@pytest.fixture
def corpus(tmp_path):
    pretraining_run.write_corpus(tmp_path / "corpus")


@pytest.fixture(scope="module")
def straight_runs(tmp_path_factory):
    """Uninterrupted runs, one per set of arguments, shared by the tests of this module."""
    folder = tmp_path_factory.mktemp("straight")
    pretraining_run.write_corpus(folder / "corpus")
    runs = {}

    def straight(*arguments):
        if arguments not in runs:
            result, out = run(folder, f"straight{len(runs)}", *arguments)
            assert result.returncode == 0, result.stderr[-3000:]
            runs[arguments] = load(out)
        return runs[arguments]

    return straight


# Dropout on: its random state must be restored for the weights to match.
DROPOUT = ("--dropout", "0.1")


@pytest.mark.parametrize(
    "feed, steps_per_epoch",
    [("stream", None), ("plain", None), ("repeat", 7)],
    ids=["pretraining-dataset", "plain-finite-dataset", "repeated-dataset-with-steps-per-epoch"],
)
def test_a_run_killed_mid_epoch_resumes_and_ends_as_if_never_stopped(
    tmp_path, corpus, straight_runs, feed, steps_per_epoch
):
    steps = () if steps_per_epoch is None else ("--steps-per-epoch", str(steps_per_epoch))
    # The uninterrupted run reads the pretraining dataset itself: the other
    # ways of feeding the same batches must train the same steps.
    straight_weights, straight = straight_runs(*DROPOUT, *steps)
    per_epoch = straight["batches_per_epoch"]
    assert straight["steps"] == 2 * per_epoch

    # Killed in the second epoch, two batches after a backup: backups come at
    # each epoch end and every 3 batches of an epoch.
    kill_at = per_epoch + 5
    arguments = (*DROPOUT, *steps, "--feed", feed)
    result, _ = run(tmp_path, "interrupted", *arguments, "--kill-at-step", str(kill_at))
    assert result.returncode == -signal.SIGKILL
    metadata = json.loads((tmp_path / "interrupted" / "backup" / "training_metadata.json").read_text())
    assert metadata["step"] == per_epoch + 3
    assert metadata["epoch"] == 1 and 0 < metadata["batches_done"] < per_epoch

    result, out = run(tmp_path, "interrupted", *arguments)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("Resuming from the backup") == 1
    assert f"at step {metadata['step']} (epoch 2, 3 batch(es) into it)." in result.stdout
    resumed_weights, resumed = load(out)
    # Only the steps after the backup ran again, and the run ended where the
    # uninterrupted one did, with the same weights to the bit: the same
    # batches, masks, dropout masks and learning rates were used.
    assert resumed["steps"] == straight["steps"]
    assert len(resumed["batches"]) == straight["steps"] - metadata["step"]
    for a, b in zip(straight_weights, resumed_weights):
        np.testing.assert_array_equal(a, b)
    # A run that ends normally removes its backup.
    assert not (tmp_path / "interrupted" / "backup").exists()


def test_two_devices_train_as_one_on_the_same_batches(tmp_path, corpus):
    one, out_one = run(tmp_path, "one", "--full-length", "--epochs", "1")
    assert one.returncode == 0, one.stderr[-3000:]
    two, out_two = run(tmp_path, "two", "--full-length", "--epochs", "1", "--devices", "2")
    assert two.returncode == 0, two.stderr[-3000:]
    weights_one, summary_one = load(out_one)
    weights_two, summary_two = load(out_two)
    assert (summary_one["replicas"], summary_two["replicas"]) == (1, 2)
    assert summary_one["steps"] == summary_two["steps"]
    first_one, first_two = summary_one["batches"][0], summary_two["batches"][0]
    # Before any update, NSP (a mean over examples, half on each device) agrees exactly.
    assert first_one["nsp_loss"] == pytest.approx(first_two["nsp_loss"], abs=1e-6)
    for batch_one, batch_two in zip(summary_one["batches"], summary_two["batches"]):
        assert batch_one["nsp_loss"] == pytest.approx(batch_two["nsp_loss"], abs=1e-4)
        # The masked-LM loss is averaged over each device's masked tokens (as
        # BERT's TPU code does), then over devices: equal up to the small
        # difference in masked tokens per half batch.
        assert batch_one["mlm_loss"] == pytest.approx(batch_two["mlm_loss"], rel=5e-4)
    for a, b in zip(weights_one, weights_two):
        np.testing.assert_allclose(a, b, atol=5e-3)

