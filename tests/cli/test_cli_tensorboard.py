"""What `kbert train` shows in TensorBoard, read back with its loaders (`kbert pretrain`: test_cli.py)."""

import contextlib
import io
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from PIL import Image

from kbert import cli
from tests.callbacks.event_files import hparams_sessions, images, scalars, texts


def test_train_draws_train_and_validation_curves_confusion_matrices_and_hparams(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", "sst2", "--encoder", "tiny", "--out", str(out), "--epochs", "2",
                     "--max-examples", "24", "--max-eval-examples", "16", "--batch-size", "8",
                     "--sequence-length", "16", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["split"] == metrics["validation_split"] == "dev" and metrics["examples"] == 16
    logs = out / "tensorboard"

    # 3 steps an epoch: no epoch ends on a multiple of the 50 steps between batch summaries.
    train = scalars(logs / "train")
    for tag in ("epoch/loss", "epoch/accuracy", "epoch/learning_rate"):
        assert sorted(train[tag]) == [0, 1]
    assert train["epoch/loss"][1] == pytest.approx(metrics["final_train_loss"], rel=1e-6)
    validation = scalars(logs / "validation")
    for tag in ("epoch/loss", "epoch/accuracy", "macro_f1", "precision/positive", "recall/negative"):
        assert sorted(validation[tag]) == [0, 1]
    # Validation runs on the examples the evaluation scores, with the final model at epoch 1.
    assert validation["epoch/accuracy"][1] == pytest.approx(metrics["accuracy"], rel=1e-6)
    positive = metrics["per_class"]["positive"]
    assert validation["precision/positive"][1] == pytest.approx(positive["precision"], rel=1e-6)
    assert sorted(images(logs / "validation")["report/confusion_matrix"]) == [0, 1]
    assert "negative" in texts(logs / "validation")["classification_report"][1]
    # The attention of the first dev text, one picture per block, at every epoch end.
    assert {tag: sorted(steps) for tag, steps in images(logs / "train").items()} == {
        "self_attention/layer_0": [0, 1], "self_attention/layer_1": [0, 1]
    }

    # The projector: the dev texts' vectors, labelled by class name, beside the validation curves.
    metadata = (logs / "validation" / "metadata.tsv").read_text().splitlines()
    assert metadata[0] == "text\tlabel" and len(metadata) == 1 + 16
    assert {line.rsplit("\t", 1)[1] for line in metadata[1:]} <= {"negative", "positive"}
    vectors = np.loadtxt(logs / "validation" / "vectors.tsv", delimiter="\t", ndmin=2)
    assert vectors.shape == (16, 128)

    sessions = hparams_sessions(tmp_path)
    assert list(sessions) == ["run/tensorboard/hparams"]
    session = sessions["run/tensorboard/hparams"]
    assert session["group"] == "run/tensorboard/hparams"  # the row is named after the run
    hparams, values = session["hparams"], session["metrics"]
    assert hparams["task"] == "sst2" and hparams["epochs"] == 2 and hparams["batch_size"] == 8
    assert hparams["learning_rate"] == pytest.approx(metrics["settings"]["learning_rate"])
    assert hparams["max_examples"] == 24 and hparams["sequence_length"] == 16
    assert hparams["max_eval_examples"] == 16 and hparams["seed"] == 0 and hparams["source"] == "local"
    assert hparams["eval_split"] == "dev"
    # The task's metric first, then the other scores, then the training logs.
    assert list(values)[:2] == ["score", "score/dev_accuracy"]
    assert values["score"] == values["score/dev_accuracy"] == pytest.approx(metrics["accuracy"], rel=1e-6)
    assert values["training/val_accuracy"] == pytest.approx(metrics["accuracy"], rel=1e-6)
    assert values["training/loss"] == pytest.approx(metrics["final_train_loss"], rel=1e-6)
    assert {"training/val_loss", "score/dev_f1_positive", "score/dev_macro_f1"} <= set(values)
    assert "training/learning_rate" not in values


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two `kbert train` runs that differ only in their evaluation size, side by side in `runs/`."""
    runs = tmp_path_factory.mktemp("runs")
    for name, eval_examples in (("small-dev", "12"), ("large-dev", "20")):
        assert cli.main(["train", "sst2", "--encoder", "tiny", "--out", str(runs / name), "--epochs", "1",
                         "--max-examples", "16", "--max-eval-examples", eval_examples, "--batch-size", "8",
                         "--sequence-length", "16", "--quiet"]) == 0
    return runs


def test_tensorboard_serves_each_dashboard_as_its_page_asks(two_runs):
    with tensorboard_server(two_runs) as get:
        # Time Series and Scalars: cards sorted by tag, grouped by the part before "/", the first
        # two groups open. The epoch curves come first; the single-point results after them.
        cards = get("/data/plugin/timeseries/tags")
        tags = {tag for runs in cards["scalars"]["runTagInfo"].values() for tag in runs}
        tags |= set(cards["images"]["tagRunSampledInfo"])
        groups = card_groups(tags)
        assert groups[0] == "epoch"
        assert groups.index("score") > 0 and groups.index("training") > 0
        scalar_tags = {tag for run in get("/data/plugin/scalars/tags").values() for tag in run}
        assert card_groups(scalar_tags)[0] == "epoch"

        # HParams: one row per run, named after it, its settings and the task's metric first.
        body = {"startIndex": 0, "sliceSize": 100, "allowedStatuses": [
            "STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]}
        groups = get("/data/plugin/hparams/session_groups", body)["sessionGroups"]
        assert sorted(group["name"] for group in groups) == [
            "large-dev/tensorboard/hparams", "small-dev/tensorboard/hparams"
        ]
        assert {group["hparams"]["max_eval_examples"] for group in groups} == {12, 20}
        experiment = get("/data/plugin/hparams/experiment",
                         {"experimentName": "", "includeMetrics": True, "hparamsLimit": 1000})
        assert experiment["metricInfos"][0]["name"]["tag"] == "score"
        differing = [info["name"] for info in experiment["hparamInfos"] if info.get("differs")]
        assert differing == ["max_eval_examples"]

        # Projector: each run's dev vectors, found from the parent folder, labelled by class.
        deadline = time.monotonic() + 60
        while not get("/data/plugins_listing")["projector"]["enabled"]:
            assert time.monotonic() < deadline, "the projector never became active"
            time.sleep(0.5)
        assert sorted(get("/data/plugin/projector/runs")) == [
            "large-dev/tensorboard/validation", "small-dev/tensorboard/validation"
        ]
        (embedding,) = get("/data/plugin/projector/info?run=small-dev/tensorboard/validation")["embeddings"]
        assert embedding["tensorName"] == "sentence_embedding" and embedding["tensorShape"] == [12, 128]
        metadata = get("/data/plugin/projector/metadata?run=small-dev/tensorboard/validation"
                       "&name=sentence_embedding", text=True).splitlines()
        assert metadata[0] == "text\tlabel" and {line.split("\t")[1] for line in metadata[1:]} <= {
            "negative", "positive"}

        # Images at a size TensorBoard shows as they are, nothing cut at the right edge.
        for run, tag, samples in (("validation", "report/confusion_matrix", 1),
                                  ("train", "self_attention/layer_0", 2)):
            for sample in range(samples):
                (entry,) = get(f"/data/plugin/images/images?run=small-dev/tensorboard/{run}"
                               f"&tag={tag}&sample={sample}")
                image = np.asarray(Image.open(io.BytesIO(
                    get(f"/data/plugin/images/individualImage?{entry['query']}", raw=True))).convert("RGB"))
                assert image.shape[1] >= 400, (tag, image.shape)
                assert np.all(image[:, -3:] == 255), f"{tag}: something runs over the right edge"


def card_groups(tags):
    """The card groups of TensorBoard's Time Series, in its order: tags sorted as it sorts them."""
    def key(tag):
        # Its comparison: runs of digits as numbers, "/" and digits before other characters.
        return [(0, int(part), "") if part.isdigit() else (0, -1, part) if part == "/" else (1, 0, part)
                for part in re.findall(r"\d+|/|[^\d/]", tag)]

    groups = []
    for tag in sorted(tags, key=key):
        group = tag.split("/", 1)[0]
        if group not in groups:
            groups.append(group)
    return groups


@contextlib.contextmanager
def tensorboard_server(log_dir):
    """`tensorboard --logdir log_dir` on a free local port; yields `get(route, json_body=None)`."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(log_dir), "--host", "127.0.0.1",
         "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )

    def get(route, body=None, text=False, raw=False):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            content = response.read()
        return content if raw else content.decode() if text else json.loads(content)

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if len(get("/data/runs")) >= 2:
                    break
            except OSError:
                pass
            assert server.poll() is None, "tensorboard exited"
            assert time.monotonic() < deadline, "tensorboard never listed the runs"
            time.sleep(0.5)
        yield get
    finally:
        server.terminate()
        server.wait(30)
