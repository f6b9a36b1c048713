"""The preprocessing layers work inside an exported graph, without kbert."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

import kbert
from tests.test_case import TINY_VOCABULARY


def test_preprocessor_runs_in_a_saved_model_loaded_without_kbert(tmp_path):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length=10)
    module = tf.Module()
    module.preprocessor = preprocessor
    module.pack = tf.function(
        lambda a, b: preprocessor((a, b)),
        input_signature=[tf.TensorSpec([None], tf.string)] * 2,
    )
    path = str(tmp_path / "preprocessing")
    tf.saved_model.save(module, path)

    texts_a, texts_b = ["The cats sat!", "", "日本 \xff"], ["on a mat", "free prize", "x" * 5000]
    expected = preprocessor((texts_a, texts_b))
    script = textwrap.dedent(
        f"""
        import sys, json
        import tensorflow as tf, tensorflow_text  # registers the TF-Text ops
        loaded = tf.saved_model.load({path!r})
        out = loaded.pack(tf.constant({texts_a!r}), tf.constant({texts_b!r}))
        print(json.dumps({{k: v.numpy().tolist() for k, v in out.items()}}))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "kbert"))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    outputs = json.loads(lines[-2])
    assert lines[-1] == "[]", f"kbert was imported: {lines[-1]}"
    for name in ("token_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(np.array(outputs[name]), expected[name].numpy())
