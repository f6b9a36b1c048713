import keras
import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
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
    return kbert.Embedder(encoder, kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), 16))


def projector_app(log_dir):
    """TensorBoard's projector plugin on `log_dir`, with its runs as TensorBoard lists them."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(log_dir))
    multiplexer.Reload()
    plugin = ProjectorPlugin(base_plugin.TBContext(
        logdir=str(log_dir), data_provider=data_provider.MultiplexerDataProvider(multiplexer, str(log_dir))
    ))
    routes = plugin.get_plugin_apps()

    def get(route, **query):
        response = Client(routes[route], Response).get(route, query_string=query)
        assert response.status_code == 200, response.get_data(as_text=True)
        return response

    return get


def test_the_projector_serves_the_vectors_and_texts(tmp_path, embedder):
    path = kbert.callbacks.write_projector(embedder, TEXTS, tmp_path / "vectors")
    assert path == str(tmp_path / "vectors" / "projector_config.pbtxt")
    config = text_format.Parse(open(path).read(), projector.ProjectorConfig())
    (embedding,) = config.embeddings
    assert embedding.tensor_name == "sentence_embedding"
    assert embedding.metadata_path == "metadata.tsv"
    lines = (tmp_path / "vectors" / "metadata.tsv").read_text().splitlines()
    assert lines == TEXTS[:3] + ["see you soon the cat"]  # one line per vector

    # Found from the parent folder, as `tensorboard --logdir <parent>` finds it.
    get = projector_app(tmp_path)
    assert get("/runs").get_json() == ["vectors"]
    (listed,) = get("/info", run="vectors").get_json()["embeddings"]
    assert listed["tensorName"] == "sentence_embedding"
    assert listed["tensorShape"] == list(embedder.embed(TEXTS).shape)
    served = get("/tensor", run="vectors", name="sentence_embedding").get_data()
    vectors = np.frombuffer(served, "float32").reshape(len(TEXTS), -1)
    np.testing.assert_array_equal(vectors, embedder.embed(TEXTS))
    assert get("/metadata", run="vectors", name="sentence_embedding").get_data(as_text=True).splitlines() == lines


def test_a_run_of_the_tensorboard_callback_gets_the_projector_beside_its_curves(tmp_path, embedder):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", loss="mse")
    x = np.zeros((4, 2))
    model.fit(x, x[:, 0], validation_data=(x, x[:, 0]), verbose=0,
              callbacks=[kbert.callbacks.TensorBoard(str(tmp_path / "run"))])
    events = sorted((tmp_path / "run" / "validation").iterdir())
    kbert.callbacks.write_projector(embedder, TEXTS[:2], tmp_path / "run" / "validation", labels=[0, 1],
                                    class_names=["ham", "spam"])
    assert sorted((tmp_path / "run" / "validation").iterdir()) == sorted(
        events + [tmp_path / "run" / "validation" / name
                  for name in ("metadata.tsv", "projector_config.pbtxt", "vectors.tsv")]
    )  # no event file added to a run that has one
    get = projector_app(tmp_path)
    assert get("/runs").get_json() == ["run/validation"]
    metadata = get("/metadata", run="run/validation", name="sentence_embedding").get_data(as_text=True)
    assert metadata.splitlines() == ["text\tlabel", f"{TEXTS[0]}\tham", f"{TEXTS[1]}\tspam"]


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
    vectors = np.frombuffer(get("/tensor", run=".", name="pairs").get_data(), "float32")
    np.testing.assert_array_equal(vectors.reshape(2, -1), [[7, 3, 1], [6, 4, 1]])


def test_bad_arguments(tmp_path, embedder):
    with pytest.raises(TypeError, match="`embed"):
        kbert.callbacks.write_projector(object(), TEXTS, tmp_path)
    with pytest.raises(TypeError, match="not one string"):
        kbert.callbacks.write_projector(embedder, "a text", tmp_path)
    with pytest.raises(ValueError, match="2 labels for 4 texts"):
        kbert.callbacks.write_projector(embedder, TEXTS, tmp_path, labels=["a", "b"])
    with pytest.raises(ValueError, match="one-line"):
        kbert.callbacks.write_projector(embedder, TEXTS, tmp_path, name="my\tvectors")
    with pytest.raises(ValueError, match="no class name"):
        kbert.callbacks.write_projector(embedder, TEXTS[:2], tmp_path, labels=[0, 2], class_names=["a", "b"])
