"""ALBERT task models end to end: loaded from a checkpoint, fitted on raw strings, saved, exported, served."""

import json

import numpy as np
import pytest
import tensorflow as tf

import kbert
from tests.albert import albert_sentence_piece_model, random_backbone, write_huggingface_albert
from tests.serving.test_serving_module import SERVE_SCRIPT, run_without_kbert_or_keras
from tests.test_case import assert_all_close, run_task_test

TEXTS = ["a good film, in 1999.", "the cat sat on the mat.", "free prize now!", "Café naïve, see you soon"]


@pytest.fixture(scope="module")
def proto():
    return albert_sentence_piece_model()


@pytest.fixture(scope="module")
def checkpoint(proto, tmp_path_factory):
    """A tiny Hugging Face ALBERT folder: 2 layers in 1 shared group, E = 8, H = 16."""
    backbone = random_backbone(proto, num_layers=2, num_groups=1, num_inner_repetitions=1)
    return str(write_huggingface_albert(tmp_path_factory.mktemp("albert") / "tiny-albert", backbone, proto))


@pytest.fixture
def albert_parts(checkpoint):
    encoder, tokenizer = kbert.load_pretrained(checkpoint, dropout=0.0)
    return encoder, tokenizer


def test_classifier_from_an_albert_checkpoint_fits_saves_and_serves_in_a_fresh_process(checkpoint, tmp_path):
    model = kbert.classifier(checkpoint, num_classes=2, sequence_length=16, class_names=["neg", "pos"])
    assert isinstance(model.preprocessor.packer.tokenizer, kbert.SentencePieceTokenizer)
    assert model.encoder.num_groups == 1 and model.encoder.embedding_size == 8
    request = {"text": TEXTS + ["", "\xff broken"]}
    restored, predictions = run_task_test(model, TEXTS, [1, 0, 0, 1], tmp_path, request=request)
    assert isinstance(restored.preprocessor.packer.tokenizer, kbert.SentencePieceTokenizer)

    # A fresh process with TensorFlow and TF-Text only (no kbert, Keras or
    # keras-hub), as a serving machine, answers raw strings the same.
    path = kbert.export(model, str(tmp_path / "served"))
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"classifier": {"path": path, "calls": {"serving_default": {"text": TEXTS}}}}))
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT)
    finished = run_without_kbert_or_keras([str(script), str(jobs)], tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    output = json.loads(finished.stdout.strip().splitlines()[-1])
    assert output["modules"] == []  # no kbert, Keras or keras-hub; TF-Text only as op libraries
    served = output["results"]["classifier"]["serving_default"]
    expected = {name: value.numpy() for name, value in model.preprocessor.serve(model, tf.constant(TEXTS)).items()}
    expected = {name: np.vectorize(bytes.decode, otypes=[object])(value) if value.dtype == object else value
                for name, value in expected.items()}
    assert sorted(served) == sorted(expected)
    assert_all_close({name: np.array(value, dtype=expected[name].dtype) for name, value in served.items()},
                     expected, atol=1e-5)


def test_tagger_on_an_albert_encoder(albert_parts, tmp_path):
    encoder, tokenizer = albert_parts
    preprocessor = kbert.TextPacker(tokenizer, sequence_length=16)
    model = kbert.tagger(encoder, labels=["O", "B-X", "I-X"], preprocessor=preprocessor)
    words = [["A", "good", "film,", "1999."], ["Café", "naïve"]]
    tags = [["O", "B-X", "I-X", "O"], ["B-X", "O"]]
    run_task_test(model, words, tags, tmp_path)  # the classifier's and QA's tests export
    # Serving splits raw text into words as the tokenizer does, with offsets.
    tagged = model.preprocessor.serve(model, np.array(["  Café   naïve film"]))
    assert [w.decode() for w in tagged["words"].numpy()[0]] == ["Café", "naïve", "film"]
    assert tagged["word_starts"].numpy()[0].tolist() == [2, 9, 15]


def test_question_answerer_on_an_albert_encoder_maps_answers_to_text(albert_parts, tmp_path):
    encoder, tokenizer = albert_parts
    preprocessor = kbert.TextPacker(tokenizer, sequence_length=32)
    model = kbert.question_answerer(encoder, preprocessor=preprocessor, max_question_length=8, doc_stride=8)
    contexts = ["In 1999, the Café Naïve opened on the mat.", "The cat sat on the mat, then ran."]
    questions = ["When did it open?", "Where did the cat sit?"]
    answers = ["1999", "the mat"]
    records = [
        {"question": q, "context": c, "answers": [{"text": a, "answer_start": c.index(a)}]}
        for q, c, a in zip(questions, contexts, answers)
    ]
    request = {"question": questions, "context": contexts}
    restored, _ = run_task_test(model, records, None, tmp_path, request=request)
    # Every answer is a span of its context, in characters, whatever the model predicts.
    for context, answer in zip(contexts, restored.answer(questions=questions, contexts=contexts)):
        assert context[answer["start"]:answer["end"]] == answer["text"]
    # And the training targets pick the tokens of the true answers.
    starts = [c.index(a) for c, a in zip(contexts, answers)]
    windows = model.preprocessor.build_windows(questions, contexts, starts,
                                               [s + len(a) for s, a in zip(starts, answers)])
    token_ids = windows["token_ids"].numpy()
    for row, text in enumerate(answers):
        first, last = windows["start_positions"].numpy()[row], windows["end_positions"].numpy()[row]
        assert tokenizer.detokenize(token_ids[row, first:last + 1]).numpy().decode() == text.lower()


def test_fill_mask_reads_a_sentence_piece_vocabulary(albert_parts, proto, tmp_path):
    encoder, tokenizer = albert_parts
    path = tmp_path / "spiece.model"
    path.write_bytes(proto)
    fill = kbert.fill_mask(kbert.Pretrainer(encoder, next_sentence=False), vocabulary=str(path), top_k=3)
    (candidates,) = fill("the [MASK] sat on the mat.")
    assert len(candidates) == 3
    assert all(c["token_id"] not in tokenizer.special_token_ids for c in candidates)
    assert_all_close(fill.tokenizer(["a cat"]), tokenizer(["a cat"]))
