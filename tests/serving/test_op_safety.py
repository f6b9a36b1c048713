"""`check_safe_to_load`: kbert's own exports pass; ops that reach files, the network or Python do not."""

import pytest
import tensorflow as tf

from kbert.serving import check_safe_to_load, op_allowlist, op_safety
from kbert.serving.make_safe_ops import registered_ops, safe_ops


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
