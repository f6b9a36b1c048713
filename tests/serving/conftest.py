"""Tiny task models of every kind, exported once for the serving tests."""

import pytest

import kbert
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

TAGS = ["O", "B-X", "I-X"]
# Inputs for each export's serving_default, bad input included: an empty
# string, invalid UTF-8, a 1 MB string, accents and CJK.
LONG_TEXT = "the cat sat on the mat . " * 40_000
REQUESTS = {
    "classifier": {"text": ["the cat sat !", "", "free prize \xff\xfe now", LONG_TEXT, "日本 café"]},
    "pair_classifier": {"text": ["the cat sat", "", LONG_TEXT], "text_pair": ["on the mat", "a dog", "soon"]},
    "tagger": {"text": ["the cat sat on the mat .", "", "dogs! see you soon", "café 日本 cat"]},
    "question_answerer": {
        "question": ["who sat ?", "", "what ?"],
        "context": ["the dog sat on the mat . the cat sat .", "a", LONG_TEXT[:2000]],
    },
    "multiple_choice": {"context": ["the cat", "a dog", ""], "choices": [["sat", "dog"], ["ran", ""], ["a", "b"]]},
    "embedder": {"text": ["the cat sat", "", "日本"]},
}


def tiny(**overrides):
    kwargs = tiny_encoder_kwargs()
    for set_by_the_entry_point in ("vocabulary_size", "max_sequence_length"):
        kwargs.pop(set_by_the_entry_point)
    return {**kwargs, **overrides}


def build_models():
    models = {
        "classifier": kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=16,
                                       class_names=["ham", "spam"], **tiny()),
        "pair_classifier": kbert.classifier("tiny", num_classes=3, vocabulary=TINY_VOCABULARY,
                                            sequence_length=16, **tiny()),
        "tagger": kbert.tagger("tiny", labels=TAGS, vocabulary=TINY_VOCABULARY, sequence_length=8, **tiny()),
        "question_answerer": kbert.question_answerer("tiny", vocabulary=TINY_VOCABULARY, sequence_length=24,
                                                     max_question_length=6, doc_stride=6, **tiny()),
        "multiple_choice": kbert.multiple_choice("tiny", num_choices=2, vocabulary=TINY_VOCABULARY,
                                                 sequence_length=12, **tiny()),
        "embedder": kbert.embedder("tiny", vocabulary=TINY_VOCABULARY, sequence_length=16, normalize=True,
                                   **tiny()),
    }
    # One short fit each: trained weights, and the classifiers learn what they read.
    models["classifier"].fit(["the cat sat", "free prize now"], [0, 1], epochs=1, verbose=0)
    models["pair_classifier"].fit((["the cat", "a dog"], ["sat", "ran"]), [0, 2], epochs=1, verbose=0)
    return models


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """`{kind: (model, version folder)}`, exported to saved_models/<kind>/1 in a temporary folder."""
    root = tmp_path_factory.mktemp("saved_models")
    return {kind: (model, kbert.export(model, str(root / kind))) for kind, model in build_models().items()}


def save_file_touching_model(folder, secret, written):
    """A plain-TensorFlow SavedModel whose `serving_default` reads `secret` and writes `written`.

    The request's texts come back as `labels`, each followed by the file's
    contents: what an untrusted model could send to whoever it likes.
    """
    import tensorflow as tf

    class FileTouching(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text):
            tf.io.write_file(str(written), tf.strings.reduce_join(text))
            contents = tf.io.read_file(str(secret))
            return {"labels": text + b" " + contents}

    module = FileTouching()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    return str(folder)


@pytest.fixture
def file_touching_model(tmp_path):
    """`(SavedModel folder, the file it reads, the file it would write)`."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    written = tmp_path / "written.txt"
    return save_file_touching_model(tmp_path / "untrusted", secret, written), secret, written
