"""saved_models/grpc_client.py builds TF Serving requests that a kbert SavedModel answers over gRPC."""

import importlib.util
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

CLIENT = Path(__file__).parents[2] / "saved_models" / "grpc_client.py"


def load_client():
    spec = importlib.util.spec_from_file_location("grpc_client", CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LocalPredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """TF Serving's Predict over gRPC, for one SavedModel: the request's signature, inputs and outputs."""

    def __init__(self, name, path):
        self.name = name
        self.signatures = tf.saved_model.load(path).signatures

    def Predict(self, request, context):
        if request.model_spec.name != self.name:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Servable not found: {request.model_spec.name}")
        signature = self.signatures[request.model_spec.signature_name or "serving_default"]
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        for name, value in signature(**inputs).items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
        return response


@pytest.fixture(scope="module")
def server(exported):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    _, path = exported["question_answerer"]
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(LocalPredictionService("squad", path), server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    yield f"localhost:{port}"
    server.stop(None)


def test_the_request_holds_the_signature_and_the_texts():
    client = load_client()
    request = client.build_request("spam", {"text": ["free prize", "café"]}, version=3)
    assert (request.model_spec.name, request.model_spec.signature_name, request.model_spec.version.value) == (
        "spam", "serving_default", 3)
    assert tf.make_ndarray(request.inputs["text"]).tolist() == ["free prize".encode(), "café".encode()]


def test_the_client_gets_the_saved_model_answers_over_grpc(exported, server, capsys):
    client = load_client()
    model, path = exported["question_answerer"]
    questions, contexts = ["who sat ?", "what ?"], ["the dog sat on the mat .", "a cat"]
    outputs = client.predict(server, "squad", {"question": questions, "context": contexts})
    expected = tf.saved_model.load(path).signatures["serving_default"](
        question=tf.constant(questions), context=tf.constant(contexts))
    assert outputs["text"].tolist() == expected["text"].numpy().tolist()
    np.testing.assert_allclose(outputs["score"], expected["score"].numpy())
    # The command line sends the same request.
    client.main(["--target", server, "--model", "squad", "--input", "question=who sat ?",
                 "--input", "context=the dog sat on the mat ."])
    assert f"text: [{expected['text'].numpy()[0]!r}]" in capsys.readouterr().out
    with pytest.raises(grpc.RpcError, match="Servable not found"):
        client.predict(server, "spam", {"text": ["x"]})


def free_local_port():
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_server_is_one_clear_line_not_a_traceback(capsys):
    client = load_client()
    target = f"127.0.0.1:{free_local_port()}"
    status = client.main(["--target", target, "--model", "spam", "--input", "text=hi",
                          "--timeout", "10"])
    err = capsys.readouterr().err
    assert status == 1
    assert f"no model server answers at {target}" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_input_no_kbert_model_takes_is_refused_before_sending(capsys):
    client = load_client()
    # Nobody listens there either: the name is refused before any call.
    with pytest.raises(SystemExit) as exit_:
        client.main(["--target", f"127.0.0.1:{free_local_port()}", "--model", "spam",
                     "--input", "txt=hi"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "no kbert model takes an input named 'txt'" in err and "text (classifier" in err
    assert "Traceback" not in err


def test_a_refused_request_says_what_the_server_said(server, capsys):
    client = load_client()
    assert client.main(["--target", server, "--model", "spam", "--input", "text=hi"]) == 1
    err = capsys.readouterr().err
    assert "refused the request: NOT_FOUND: Servable not found: spam" in err
