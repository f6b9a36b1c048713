"""`check_safe_to_load`: kbert's own exports pass; ops that reach files, the network or Python do not."""

import re
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from kbert import cli
from kbert.serving import check_safe_to_load, op_allowlist, op_safety
from kbert.serving.make_safe_ops import registered_ops, safe_ops
from tests.serving import crafted_models


def test_every_export_of_kbert_is_safe_to_load(exported):
    for kind, (_, path) in exported.items():
        ops = check_safe_to_load(path)
        assert "SaveV2" in ops and "RestoreV2" in ops, kind  # in the saver functions, where they are allowed


def test_the_safe_list_is_made_by_its_rules_and_holds_no_op_that_reaches_outside():
    listed = op_safety._safe_ops()
    assert listed == safe_ops(registered_ops()), "run kbert/serving/make_safe_ops.py"
    reaching_outside = {"ReadFile", "WriteFile", "MatchingFiles", "SaveV2", "RestoreV2", "MergeV2Checkpoints",
                        "PyFunc", "PyFuncStateless", "EagerPyFunc", "PrintV2", "TextLineDataset", "TFRecordDataset",
                        "ImmutableConst", "DecodeProtoV2", "Abort", "InitializeTableFromTextFileV2",
                        "CreateSummaryFileWriter", "DebugIdentityV2", "CollectiveReduceV2", "XlaCallModule"}
    assert not listed & reaching_outside
    # The other list, of what TF Serving has, holds some of them: it is not a safety list.
    assert {"ReadFile", "WriteFile", "PyFunc"} <= op_allowlist.allowed_ops()


def test_a_signature_that_calls_the_saver_itself_is_refused(tmp_path):
    # The checkpoint ops are allowed in the SavedModel's own save and restore
    # functions only; anywhere else, SaveV2 writes where the graph says.
    class Saving(tf.Module):
        def __init__(self):
            self.weight = tf.Variable(1.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            tf.raw_ops.SaveV2(prefix=str(tmp_path / "elsewhere"), tensor_names=["w"], shape_and_slices=[""],
                              tensors=[self.weight.read_value()])
            return {"labels": text}

    module = Saving()
    tf.saved_model.save(module, str(tmp_path / "saving"), signatures={"serving_default": module.serve})
    with pytest.raises(ValueError, match=r"\['SaveV2'\]"):
        check_safe_to_load(tmp_path / "saving")


def test_an_initializer_hidden_in_the_save_function_is_refused(tmp_path, capsys):
    # Loading runs every function the object graph names, whatever else calls it.
    written = tmp_path / "written"
    path = crafted_models.initializer_hidden_in_the_save_function(tmp_path / "hidden", written)
    assert cli.main(["predict", path, "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kbert predict: error: Refused to load the SavedModel at {path}: ") and "\n" not in err
    assert "['SaveV2']" in err
    assert not list(tmp_path.glob("written*"))
    # Loading it does write (what the check prevents).
    tf.saved_model.load(path)
    assert list(tmp_path.glob("written*"))


def test_a_restore_function_that_reads_a_path_of_its_own_is_refused(exported, tmp_path):
    _, export = exported["classifier"]
    path = crafted_models.restore_from_a_path_in_the_model(export, tmp_path / "elsewhere",
                                                           tmp_path / "other" / "variables")
    with pytest.raises(ValueError, match=r"\['RestoreV2'\]"):
        check_safe_to_load(path)


def test_the_save_function_read_by_a_signature_is_checked_as_running_code(exported, tmp_path):
    _, export = exported["classifier"]
    path = crafted_models.save_node_read_by_a_signature(export, tmp_path / "saving")
    with pytest.raises(ValueError, match=r"\['MergeV2Checkpoints', 'SaveV2', 'ShardedFilename'\]"):
        check_safe_to_load(path)


def test_a_model_that_waits_on_a_queue_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"\['FIFOQueueV2', 'QueueDequeueV2'\]"):
        check_safe_to_load(crafted_models.queue_model(tmp_path / "waiting"))
    assert not {name for name in op_safety._safe_ops() if re.search("Queue|Barrier|Accumulator|Stage", name)}


@pytest.mark.parametrize("kind, limit, flag", [("loop", ["--time-limit", "4"], "--time-limit (4 s)"),
                                               ("memory", ["--memory-limit", "2"], "--memory-limit (2 GiB)")])
def test_predict_stops_a_model_that_runs_without_end(tmp_path, kind, limit, flag):
    # Safe ops can still loop or fill memory: kbert predict bounds both, in one line.
    path = crafted_models.endless_model(tmp_path / kind, kind)
    check_safe_to_load(path)
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "kbert.cli", "predict", path, "hello", *limit],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kbert predict: error: {path} ran past {flag} and was stopped"), result.stderr
    assert time.monotonic() - start < 60
