"""Training across worker processes on 127.0.0.1: `kbert.backend.distribute` and the multi-worker `fit`.

Each worker is a process of its own running `distribute_run.py`; every
process has a time limit and is killed with SIGKILL when the test ends (a
worker waiting for a dead peer ignores SIGTERM).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kbert.backend.distribute import make_strategy, read_tf_config, wait_for_workers
from kbert.pretraining.dataset import prepare_pretraining_data
from tests.pretraining.pretraining_run import VOCABULARY, write_corpus

SCRIPT = Path(__file__).parent / "distribute_run.py"
# A limit for hangs, not for speed: three processes share two cores here.
PROCESS_SECONDS = 600
REPOSITORY = str(Path(__file__).parents[2])
pytestmark = pytest.mark.slow  # worker processes


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports, index):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
                       "task": {"type": "worker", "index": index}})


class Processes:
    """Started processes, killed (SIGKILL) when the test ends."""

    def __init__(self):
        self.running = []

    def start(self, folder, name, jobs, *arguments, workers=2, kill_at_step=None, command=None):
        """`workers` processes of `jobs` (0: one process without TF_CONFIG), or of `command`."""
        ports = free_ports(workers)
        started = []
        for index in range(max(workers, 1)):
            env = {**os.environ, "PYTHONPATH": REPOSITORY}
            env.pop("TF_CONFIG", None)
            if workers:
                env["TF_CONFIG"] = tf_config(ports, index)
            out = folder / f"{name}-{index}.npz"
            extra = ["--kill-at-step", str(kill_at_step)] if kill_at_step and index == 1 else []
            log = open(folder / f"{name}-{index}.log", "w")
            if command is None:
                command_line = [sys.executable, str(SCRIPT), jobs, "--corpus", str(folder / "corpus"),
                                "--logdir", str(folder / f"{name}-logs"), "--out", str(out), *arguments,
                                *extra]
            else:
                command_line = [sys.executable, *command]
            process = subprocess.Popen(
                command_line,
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
            process.out, process.log = out, folder / f"{name}-{index}.log"
            self.running.append(process)
            started.append(process)
        return started

    def wait(self, processes, timeout=PROCESS_SECONDS):
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.kill_all()
                pytest.fail(f"A worker ran past {timeout} s:\n{tail(process)}")
        return [process.returncode for process in processes]

    def kill_all(self):
        for process in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def tail(process, characters=3000):
    return process.log.read_text()[-characters:]


def results(process):
    weights = np.load(process.out)
    return weights, json.loads(process.out.with_suffix(".json").read_text())


def group(weights, prefix):
    keys = [key for key in weights.files if key.startswith(prefix + "_")]
    return [weights[key] for key in sorted(keys, key=lambda key: int(key.rsplit("_", 1)[1]))]


@pytest.fixture(scope="module")
def processes():
    started = Processes()
    yield started
    started.kill_all()


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory, processes):
    """Two workers and one process without TF_CONFIG, on the same data, run side by side."""
    folder = tmp_path_factory.mktemp("cluster")
    # 84 full-length pairs: 7 batches of 12, 6 per worker.
    write_corpus(folder / "corpus", documents=6, sentences=32)
    prepare_pretraining_data([str(folder / "corpus" / "*.txt")], folder / "corpus" / "prepared",
                             VOCABULARY, sequence_length=32, short_sequence_rate=0.0,
                             examples_per_shard=21, verbose=False)
    workers = processes.start(folder, "workers", "keras-fit,pretrain,classify,batches")
    single = processes.start(folder, "single", "pretrain,classify,batches", workers=0)
    for process, code in zip(workers + single, processes.wait(workers + single)):
        assert code == 0, tail(process)
    return folder, [results(p) for p in workers], results(single[0])


def test_plain_keras_fit_still_fails_under_multi_worker_strategy(cluster_runs):
    _, workers, _ = cluster_runs
    for _, summary in workers:
        # When this fails, Keras' `fit` trains across workers (keras-team/keras#20585 is
        # fixed): `kbert.backend.distribute.MultiWorkerFit` can go.
        assert summary["keras_fit"].startswith("ValueError"), summary["keras_fit"]
        assert "PerReplica" in summary["keras_fit"]


def test_two_workers_train_as_one_process_on_the_same_global_batches(cluster_runs):
    _, ((first, summary), (second, _)), (single, single_summary) = cluster_runs
    assert summary["replicas"] == 2 and single_summary["replicas"] == 1
    assert summary["pretrain_steps"] == single_summary["pretrain_steps"] == 14
    # The classifier's loss is a mean over examples, the same whether the
    # batch is split or not. The masked-LM loss is averaged over each
    # replica's masked tokens (as with `MirroredStrategy`, and BERT's TPU
    # code), which differ a little in number between the halves of a batch.
    for model, tolerance in (("classify", 2e-6), ("pretrain", 2e-3)):
        for a, b, c in zip(group(first, model), group(second, model), group(single, model)):
            np.testing.assert_array_equal(a, b)  # the workers hold one model
            np.testing.assert_allclose(a, c, atol=tolerance)
    for name in ("loss", "val_loss", "accuracy"):
        np.testing.assert_allclose(summary["classify_history"][name],
                                   single_summary["classify_history"][name], rtol=1e-5)
    np.testing.assert_allclose(summary["pretrain_history"]["nsp_loss"],
                               single_summary["pretrain_history"]["nsp_loss"], rtol=1e-4)


def test_across_two_workers_each_example_of_an_epoch_is_used_once(cluster_runs):
    _, ((first, _), (second, _)), (single, _) = cluster_runs
    # Prepared TFRecords: the workers read different shard files.
    together = np.concatenate([first["prepared_examples"], second["prepared_examples"]])
    assert len(first["prepared_examples"]) == len(second["prepared_examples"]) == 42
    assert sorted(map(tuple, together.tolist())) == sorted(map(tuple, single["prepared_examples"].tolist()))
    assert len(set(map(tuple, together.tolist()))) == len(together)  # no pair is used twice
    # In-memory texts: each worker takes its part of every (shuffled) batch.
    texts = np.concatenate([first["texts_examples"], second["texts_examples"]])
    assert sorted(texts.tolist()) == list(range(18))
    assert first["texts_examples"].tolist() != [0, 1, 2, 3, 4, 5, 12, 13, 14]  # shuffled


def test_tensorboard_and_checkpoints_are_written_by_the_chief_only(cluster_runs):
    folder, _, _ = cluster_runs
    logs = folder / "workers-logs" / "pretrain"
    assert len(list((logs / "tensorboard" / "train").glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (logs / "checkpoints").iterdir()) == ["epoch-001.keras", "epoch-002.keras"]
    assert not (logs / "backup").exists()  # removed at the end of the run


def test_a_killed_worker_and_its_peer_restart_and_end_as_an_uninterrupted_run(cluster_runs, processes):
    folder, ((straight, straight_summary), _), _ = cluster_runs
    # Worker 1 dies right after step 12, in the second epoch, two steps after a
    # backup (every 3 steps and at epoch ends: 7, 10); worker 0 then waits for it
    # forever, and is killed too, as a cluster manager would.
    killed = processes.start(folder, "killed", "pretrain", kill_at_step=12)
    assert processes.wait(killed[1:])[0] == -signal.SIGKILL, tail(killed[1])
    time.sleep(1)
    processes.kill_all()
    metadata = json.loads((folder / "killed-logs" / "pretrain" / "backup" / "training_metadata.json").read_text())
    assert (metadata["step"], metadata["epoch"], metadata["batches_done"]) == (10, 1, 3)

    resumed = processes.start(folder, "killed", "pretrain")
    for process, code in zip(resumed, processes.wait(resumed)):
        assert code == 0, tail(process)
        assert "Resuming from the backup" in process.log.read_text()
    for process in resumed:
        weights, summary = results(process)
        assert summary["pretrain_steps"] == straight_summary["pretrain_steps"]
        for a, b in zip(group(straight, "pretrain"), group(weights, "pretrain")):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "config, error, match",
    [
        ("not json", ValueError, "not JSON"),
        ('{"cluster": {"worker": ["127.0.0.1:1"]}}', ValueError, "no task"),
        ('{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 2}}',
         ValueError, "worker 2, but the cluster has 2 worker"),
        ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "chief", "index": 0}}',
         ValueError, "'chief' is not in its cluster"),
        ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}',
         ValueError, "not host:port"),
    ],
)
def test_a_malformed_tf_config_is_a_clear_error(config, error, match):
    with pytest.raises(error, match=match):
        read_tf_config(config)


def test_an_unreachable_worker_is_an_error_after_the_timeout_not_a_hang(monkeypatch):
    ports = free_ports(2)
    monkeypatch.setenv("TF_CONFIG", tf_config(ports, 0))
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=f"worker 1 at 127.0.0.1:{ports[1]}"):
        make_strategy("multi-worker", connect_timeout=1.5)
    assert time.monotonic() - start < 10


def test_a_second_worker_with_the_same_index_is_an_error():
    ports = free_ports(2)
    holder = socket.socket()
    holder.bind(("", ports[0]))
    holder.listen(1)  # the worker already started with index 0
    try:
        cluster, kind, index = read_tf_config(tf_config(ports, 0))
        with pytest.raises(ValueError, match="in use"):
            wait_for_workers(cluster, kind, index, timeout=1)
    finally:
        holder.close()


def test_gradient_accumulation_under_a_strategy_is_refused_with_a_clear_error():
    import tensorflow as tf

    import kbert

    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        pretrainer = kbert.Pretrainer(kbert.Encoder(vocabulary_size=len(VOCABULARY), num_layers=1,
                                                    hidden_dim=8, num_heads=2, intermediate_dim=16))
        pretrainer.compile(gradient_accumulation_steps=2)
    x = {"token_ids": np.full((2, 4), 5), "segment_ids": np.zeros((2, 4), int),
         "padding_mask": np.ones((2, 4), int), "mask_positions": np.ones((2, 1), int)}
    y = {"mlm": np.full((2, 1), 6), "nsp": np.zeros(2, int)}
    with pytest.raises(ValueError, match="cannot accumulate gradients under a tf.distribute strategy"):
        pretrainer.fit(x, y, verbose=0)


def test_kbert_pretrain_runs_as_a_worker_when_tf_config_is_set(cluster_runs, processes, tmp_path):
    folder, _, _ = cluster_runs
    (tmp_path / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    out = tmp_path / "run"
    command = ["-m", "kbert.cli", "pretrain", "--corpus", str(folder / "corpus" / "*.txt"),
               "--vocabulary", str(tmp_path / "vocab.txt"), "--out", str(out), "--preset", "tiny",
               "--sequence-length", "32", "--batch-size", "12", "--steps-per-epoch", "3", "--quiet"]
    workers = processes.start(tmp_path, "cli", None, command=command)
    for process, code in zip(workers, processes.wait(workers)):
        assert code == 0, tail(process)
        assert "Saved " in process.log.read_text()
    # One model, one set of summaries: the chief's.
    assert (out / "pretrainer.keras").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch-001.keras"]
    # events.out.tfevents.<time>.<host>.<process id>.<number>.v2
    writers = {p.name.split(".")[-3] for p in (out / "tensorboard").rglob("events.out.tfevents.*")}
    assert len(writers) == 1  # the event files of one process
