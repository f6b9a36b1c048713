"""The op allowlist is TF Serving 2.20's model server's ops, and the check refuses any other op."""

import pytest
import tensorflow as tf

import kbert
from kbert.serving import make_op_allowlist, op_allowlist


def test_the_allowlist_names_the_release_it_was_made_from():
    # The header and the script that makes the list agree on the versions.
    assert op_allowlist.served_by() == (
        f"TF Serving {make_op_allowlist.TF_SERVING} (TensorFlow {make_op_allowlist.TENSORFLOW}, "
        f"TF-Text {make_op_allowlist.TF_TEXT})"
    )
    header = [line for line in op_allowlist.ALLOWLIST.read_text().splitlines() if line.startswith("#")]
    assert any(f"TensorFlow {make_op_allowlist.TENSORFLOW}:" in line for line in header)


def test_the_allowlist_has_the_ops_kbert_graphs_use_and_tf_text_2_20_ops():
    allowed = kbert.serving.allowed_ops()
    assert {"FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets", "NormalizeUTF8", "MatMul"} <= allowed
    # TF-Text 2.20, which TF Serving 2.20 links, has the round-robin trimmer.
    assert "TFText>RoundRobinTrim" in allowed


@pytest.mark.skipif(not hasattr(tf.raw_ops, "DecodeJxl"), reason="this TensorFlow has no DecodeJxl op")
def test_an_op_newer_than_the_served_tensorflow_is_refused(tmp_path):
    # DecodeJxl is registered by the installed TensorFlow (2.21) but not by
    # TensorFlow 2.20, the one TF Serving 2.20 is built from.
    assert "DecodeJxl" not in kbert.serving.allowed_ops()
    module = tf.Module()
    module.decode = tf.function(
        lambda contents: tf.raw_ops.DecodeJxl(contents=contents),
        input_signature=[tf.TensorSpec([], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path))
    assert "DecodeJxl" in kbert.serving.saved_model_ops(str(tmp_path))
    with pytest.raises(ValueError, match=r"TF Serving 2\.20\.0 \(TensorFlow 2\.20\.0, .*lacks: \['DecodeJxl'\]"):
        kbert.serving.check_ops(str(tmp_path))


def test_ops_off_the_list_are_named_in_order():
    assert op_allowlist.unserved_ops({"MatMul", "NoSuchOpB", "NoSuchOpA"}) == ["NoSuchOpA", "NoSuchOpB"]
    assert op_allowlist.unserved_ops({"MatMul", "TFText>RoundRobinTrim"}) == []
