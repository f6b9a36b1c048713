import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.plugins import base_plugin, projector
from tensorboard.plugins.projector.projector_plugin import ProjectorPlugin
from werkzeug.test import Client
from werkzeug.wrappers import Response

import kbert
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

TEXTS = ["the cat sat on the mat", "a good film", "free prize now!", "see you soon\tthe\ncat"]


@pytest.fixture(scope="module")
def embedder():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    return kbert.Embedder(encoder, kbert.Preprocessor(kbert.Tokenizer(TINY_VOCABULARY), 16))


def projector_app(log_dir):
    """TensorBoard's projector plugin on `log_dir`, as a test HTTP client."""
    plugin = ProjectorPlugin(base_plugin.TBContext(logdir=str(log_dir)))
    routes = plugin.get_plugin_apps()

    def get(route, **query):
        response = Client(routes[route], Response).get(route, query_string=query)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response

    return get


def test_the_projector_serves_the_vectors_and_texts(tmp_path, embedder):
    path = kbert.callbacks.write_projector(embedder, TEXTS, tmp_path)
    assert path == str(tmp_path / "projector_config.pbtxt")
    config = text_format.Parse((tmp_path / "projector_config.pbtxt").read_text(),
                               projector.ProjectorConfig())
    (embedding,) = config.embeddings
    assert embedding.tensor_name == "sentence_embedding/.ATTRIBUTES/VARIABLE_VALUE"
    assert embedding.metadata_path == "metadata.tsv"
    lines = (tmp_path / "metadata.tsv").read_text().splitlines()
    assert lines == TEXTS[:3] + ["see you soon the cat"]  # one line per vector

    get = projector_app(tmp_path)
    served = get("/tensor", run=".", name=embedding.tensor_name).get_data()
    vectors = np.frombuffer(served, "float32").reshape(len(TEXTS), -1)
    np.testing.assert_array_equal(vectors, embedder.embed(TEXTS))
    assert get("/metadata", run=".", name=embedding.tensor_name).get_data(as_text=True).splitlines() == lines


class LengthEmbedder:
    """Anything with `embed` will do: vectors of the texts' lengths."""

    def embed(self, texts, batch_size=None):
        first, second = texts
        return np.array([[len(a), len(b), 1.0] for a, b in zip(first, second)], "float32")


def test_labels_and_pairs(tmp_path):
    pairs = (["the cat", "a film"], ["sat", "good"])
    kbert.callbacks.write_projector(LengthEmbedder(), pairs, tmp_path, labels=["x", "y"], name="pairs")
    assert (tmp_path / "metadata.tsv").read_text().splitlines() == [
        "text\tlabel", "the cat | sat\tx", "a film | good\ty"
    ]
    get = projector_app(tmp_path)
    vectors = np.frombuffer(get("/tensor", run=".", name="pairs/.ATTRIBUTES/VARIABLE_VALUE").get_data(),
                            "float32")
    np.testing.assert_array_equal(vectors.reshape(2, -1), [[7, 3, 1], [6, 4, 1]])


def test_bad_arguments(tmp_path, embedder):
    with pytest.raises(TypeError, match="`embed"):
        kbert.callbacks.write_projector(object(), TEXTS, tmp_path)
    with pytest.raises(TypeError, match="not one string"):
        kbert.callbacks.write_projector(embedder, "a text", tmp_path)
    with pytest.raises(ValueError, match="2 labels for 4 texts"):
        kbert.callbacks.write_projector(embedder, TEXTS, tmp_path, labels=["a", "b"])
    with pytest.raises(ValueError, match="identifier"):
        kbert.callbacks.write_projector(embedder, TEXTS, tmp_path, name="my vectors")
