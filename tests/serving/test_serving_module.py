"""Every task model, exported, answers raw strings as Keras does, in a process without kbert or Keras.

The serving process runs where kbert, Keras and keras-hub are not installed
and TF-Text's Python package is not imported (it imports Keras): it loads
TF-Text's compiled op libraries, as TF Serving's model server links them.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.serving import FROM_TF_EXAMPLE, FROM_TOKEN_IDS, SERVING_DEFAULT
from tests.serving.conftest import REQUESTS, TAGS

EXCLUDED = {"kbert", "keras", "keras_hub", "keras_nlp", "__editable__", "_kbert_editable"}
# Run in a fresh process: only TensorFlow and TF-Text are imported.
SERVE_SCRIPT = textwrap.dedent(
    """
    import glob, importlib.util, json, os, sys
    import numpy as np
    import tensorflow as tf

    # TF-Text's ops, as TF Serving links them: its compiled op libraries only
    # (its Python package imports Keras).
    ops_folder = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    for library in sorted(glob.glob(os.path.join(ops_folder, "python", "ops", "*.so"))):
        tf.load_op_library(library)

    def plain(value):
        value = value.numpy()
        if value.dtype == object:
            return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value).tolist()
        return value.tolist()

    def tensors(signature, inputs):
        if signature == "from_tf_example":  # serialized bytes travel as latin-1 text
            return {"examples": tf.constant([e.encode("latin-1") for e in inputs["examples"]])}
        dtype = tf.int32 if signature == "from_token_ids" else tf.string
        return {name: tf.constant(value, dtype) for name, value in inputs.items()}

    jobs = json.load(open(sys.argv[1]))
    results = {}
    for kind, job in jobs.items():
        signatures = tf.saved_model.load(job["path"]).signatures
        results[kind] = {"signatures": sorted(signatures.keys())}
        for name, inputs in job["calls"].items():
            outputs = signatures[name](**tensors(name, inputs))
            results[kind][name] = {key: plain(value) for key, value in outputs.items()}
    modules = sorted({m.split(".")[0] for m in sys.modules} & {"kbert", "keras", "keras_hub", "tensorflow_text"})
    print(json.dumps({"results": results, "modules": modules}))
    """
)


def run_without_kbert_or_keras(arguments, folder):
    """Runs Python where only TensorFlow, TF-Text and their dependencies are installed.

    The process sees a copy of this environment's site-packages (as links)
    without kbert, keras and keras-hub, as on a serving machine.
    """
    packages = folder / "site-packages"
    packages.mkdir()
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "tensorflow")))
    for name in os.listdir(site):
        if name.split("-")[0].split(".")[0].lower() not in EXCLUDED and not name.endswith(".pth"):
            os.symlink(os.path.join(site, name), packages / name)
    environment = dict(os.environ, PYTHONPATH=str(packages))
    return subprocess.run([sys.executable, "-S", *arguments], capture_output=True, text=True,
                          timeout=600, env=environment, cwd=folder)


def tf_examples(request):
    """Serialized tf.train.Examples holding each row of a request as bytes features."""
    names = list(request)
    rows = []
    for values in zip(*(request[name] for name in names)):
        feature = {}
        for name, value in zip(names, values):
            value = [value] if isinstance(value, str) else value
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode() for v in value]))
        rows.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return rows


def token_ids_request(kind, model, request):
    if kind == "multiple_choice":
        inputs = model.preprocessor.forward_batch((tf.constant(request["context"]), tf.constant(request["choices"])))
    elif kind == "question_answerer":
        windows = model.preprocessor.build_windows(request["question"], request["context"])
        inputs = {name: windows[name] for name in ("token_ids", "segment_ids", "padding_mask")}
    elif kind == "pair_classifier":
        inputs = model.preprocessor.packer((request["text"], request["text_pair"]))
    else:  # packed as one text per row (for a tagger: per-token outputs)
        inputs = model.preprocessor.packer(request["text"])
    return {name: value.numpy().tolist() for name, value in inputs.items()}


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
    """What a fresh process got from every signature of every export."""
    jobs = {}
    for kind, (model, path) in exported.items():
        jobs[kind] = {"path": path, "calls": {
            SERVING_DEFAULT: REQUESTS[kind],
            FROM_TOKEN_IDS: token_ids_request(kind, model, REQUESTS[kind]),
            FROM_TF_EXAMPLE: {"examples": [e.decode("latin-1") for e in tf_examples(REQUESTS[kind])]},
        }}
    folder = tmp_path_factory.mktemp("serve")
    (folder / "serve.py").write_text(SERVE_SCRIPT)
    (folder / "jobs.json").write_text(json.dumps(jobs))
    result = run_without_kbert_or_keras([str(folder / "serve.py"), str(folder / "jobs.json")], folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_serving_process_has_neither_kbert_nor_keras(served):
    assert served["modules"] == []


@pytest.mark.parametrize("kind", list(REQUESTS))
def test_every_export_has_the_three_signatures(served, kind):
    assert served["results"][kind]["signatures"] == sorted([SERVING_DEFAULT, FROM_TOKEN_IDS, FROM_TF_EXAMPLE])


def test_signatures_are_traced_as_asked_and_tf_examples_run_the_text_graph(exported):
    from kbert.serving.serving_module import ServingModule

    model, _ = exported["pair_classifier"]
    module = ServingModule(model)
    assert list(module.signatures([SERVING_DEFAULT])) == [SERVING_DEFAULT]
    with pytest.raises(ValueError, match=r"Unknown signatures \['predict'\]"):
        module.signatures(["predict"])
    every = module.signatures()
    # from_tf_example parses its examples, then calls serving_default's own function: traced once, not twice.
    calls = [op.get_attr("f").name for op in every[FROM_TF_EXAMPLE].graph.get_operations()
             if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
    assert calls == [every[SERVING_DEFAULT].name.decode()]


@pytest.mark.parametrize("kind", ["classifier", "pair_classifier"])
def test_classifiers_serve_the_keras_probabilities(exported, served, kind):
    model, _ = exported[kind]
    request = REQUESTS[kind]
    x = (request["text"], request["text_pair"]) if "text_pair" in request else request["text"]
    expected = model.predict_proba(x, verbose=0)
    for signature in (SERVING_DEFAULT, FROM_TOKEN_IDS, FROM_TF_EXAMPLE):
        outputs = served["results"][kind][signature]
        np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
        assert outputs["label_ids"] == expected.argmax(-1).tolist()
        if model.class_names:
            assert outputs["labels"] == [model.class_names[i] for i in expected.argmax(-1)]
        else:
            assert "labels" not in outputs


def test_the_embedder_serves_the_keras_embeddings(exported, served):
    model, _ = exported["embedder"]
    expected = model.embed(REQUESTS["embedder"]["text"])
    for signature in (SERVING_DEFAULT, FROM_TOKEN_IDS, FROM_TF_EXAMPLE):
        np.testing.assert_allclose(served["results"]["embedder"][signature]["sentence_embedding"], expected,
                                   atol=1e-5)


def test_the_tagger_serves_a_tag_for_every_word_of_raw_text(exported, served):
    model, _ = exported["tagger"]
    texts = REQUESTS["tagger"]["text"]
    for signature in (SERVING_DEFAULT, FROM_TF_EXAMPLE):
        outputs = served["results"]["tagger"][signature]
        counts = outputs["word_counts"]
        words = [row[:n] for row, n in zip(outputs["words"], counts)]
        assert words == [["the", "cat", "sat", "on", "the", "mat", "."], [], ["dogs", "!", "see", "you", "soon"],
                         ["café", "日", "本", "cat"]]  # each CJK character is a word, as BERT splits them
        # Character offsets point at each word in its text.
        for text, row_words, starts, ends, n in zip(texts, words, outputs["word_starts"], outputs["word_ends"], counts):
            assert [text[s:e] for s, e in zip(starts[:n], ends[:n])] == row_words
            assert starts[n:] == ends[n:] == [-1] * (len(starts) - n)
        probabilities = model.predict_proba(words, verbose=0)
        for i, n in enumerate(counts):
            assert outputs["tags"][i][:n] == [TAGS[j] for j in probabilities[i].argmax(-1)]
            np.testing.assert_allclose(outputs["scores"][i][:n], probabilities[i].max(-1), atol=1e-5)
            assert outputs["tag_ids"][i][n:] == [-1] * (len(outputs["tag_ids"][i]) - n)
    by_token = served["results"]["tagger"][FROM_TOKEN_IDS]
    ids = model.preprocessor.packer(texts)
    np.testing.assert_allclose(by_token["probabilities"], tf.nn.softmax(model(ids)).numpy(), atol=1e-5)


def test_question_answering_serves_the_keras_answers(exported, served):
    model, _ = exported["question_answerer"]
    request = REQUESTS["question_answerer"]
    expected = model.answer(questions=request["question"], contexts=request["context"], verbose=0)
    for signature in (SERVING_DEFAULT, FROM_TF_EXAMPLE):
        outputs = served["results"]["question_answerer"][signature]
        assert outputs["text"] == [a["text"] for a in expected]
        assert outputs["start"] == [a["start"] for a in expected]
        assert outputs["end"] == [a["end"] for a in expected]
        np.testing.assert_allclose(outputs["score"], [a["score"] for a in expected], rtol=1e-5, atol=1e-5)
        for context, text, start, end in zip(request["context"], outputs["text"], outputs["start"], outputs["end"]):
            assert context[start:end] == text
    windows = model.preprocessor.build_windows(request["question"], request["context"])
    logits = model({name: windows[name] for name in ("token_ids", "segment_ids", "padding_mask")})
    by_token = served["results"]["question_answerer"][FROM_TOKEN_IDS]
    np.testing.assert_allclose(by_token["start_logits"], logits["start_logits"].numpy(), atol=1e-5)


def test_multiple_choice_serves_the_keras_probabilities(exported, served):
    model, _ = exported["multiple_choice"]
    request = REQUESTS["multiple_choice"]
    expected = model.predict_proba((request["context"], request["choices"]), verbose=0)
    for signature in (SERVING_DEFAULT, FROM_TOKEN_IDS, FROM_TF_EXAMPLE):
        outputs = served["results"]["multiple_choice"][signature]
        np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
        assert outputs["choice_ids"] == expected.argmax(-1).tolist()


@pytest.mark.parametrize("kind", ["pair_classifier", "question_answerer"])
def test_saved_model_cli_lists_the_documented_signatures(exported, kind):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run([cli, "show", "--dir", exported[kind][1], "--all"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for signature in (SERVING_DEFAULT, FROM_TOKEN_IDS, FROM_TF_EXAMPLE):
        assert f"signature_def['{signature}']" in result.stdout
    for name in [*REQUESTS[kind], "examples", "token_ids", "segment_ids", "padding_mask"]:
        assert f"inputs['{name}'] tensor_info:" in result.stdout, name


def test_every_op_is_one_tf_serving_has(exported):
    for kind, (_, path) in exported.items():
        ops = kbert.serving.check_ops(path)
        assert "FastWordpieceTokenizeWithOffsets" in ops or kind == "embedder" and ops
        # kbert trims pairs with core ops: older model servers, which link
        # TF-Text 2.12.1, lack this op.
        assert "TFText>RoundRobinTrim" not in ops


def test_the_vocabulary_is_an_asset_and_no_local_path_is_stored(exported):
    model, path = exported["classifier"]
    with open(os.path.join(path, "assets", "vocab.txt"), encoding="utf-8") as f:
        assert f.read().splitlines() == model.preprocessor.tokenizer.get_vocabulary()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        graph = f.read()
    import tempfile

    assert tempfile.gettempdir().encode() not in graph
    assert os.getcwd().encode() not in graph
