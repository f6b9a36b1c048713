"""Calls a kbert model in TF Serving over gRPC, sending raw text.

Needs `pip install tensorflow-serving-api` (not kbert). With the model server
listening for gRPC on port 8500:

    python saved_models/grpc_client.py --model spam --input text="WINNER!! claim your prize"
    python saved_models/grpc_client.py --model squad --input question="who sat?" \\
        --input context="the cat sat on the mat."

Each `--input NAME=TEXT` adds one text to that input; give every input the
same number of texts (a batch). Multiple choice's `choices` input is 2-D;
call `predict()` from Python for it.

When no server answers, or the server refuses the request (an unknown
model, a wrong input), it says so in one line on stderr and exits with
status 1; an input name no kbert model takes is refused before sending
(status 2).
"""

import argparse
import sys

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


# The inputs of kbert's `serving_default` signatures, by task.
KBERT_INPUTS = {
    "text": "classifier, embedder, tagger",
    "text_pair": "classifier and embedder of pairs, with text",
    "question": "question answerer, with context",
    "context": "question answerer (with question), multiple choice (with choices)",
    "choices": "multiple choice",
}


def build_request(model_name, inputs, signature_name="serving_default", version=None):
    """A `PredictRequest` for a kbert signature; `inputs` maps input names to lists of texts."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    for name, texts in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(texts, dtype=tf.string))
    return request


def parse_response(response):
    """`{output name: NumPy array}` of a `PredictResponse` (strings stay bytes)."""
    return {name: tf.make_ndarray(tensor) for name, tensor in response.outputs.items()}


def predict(target, model_name, inputs, signature_name="serving_default", version=None, timeout=30.0):
    """Sends one request to the model server at `target` (`host:port`) and returns its outputs."""
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(build_request(model_name, inputs, signature_name, version), timeout)
    return parse_response(response)


def main(argv=None):
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="localhost:8500", help="the model server's gRPC host:port")
    parser.add_argument("--model", required=True, help="the model's name in models.config")
    parser.add_argument("--signature", default="serving_default", help="the signature to call")
    parser.add_argument("--version", type=int, default=None, help="default: the newest the server has")
    parser.add_argument("--input", action="append", required=True, metavar="NAME=TEXT",
                        help="a text for an input (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    args = parser.parse_args(argv)
    inputs = {}
    for item in args.input:
        name, separator, text = item.partition("=")
        if not separator:
            parser.error(f"--input takes NAME=TEXT, got {item!r}")
        if args.signature == "serving_default" and name not in KBERT_INPUTS:
            known = "; ".join(f"{key} ({tasks})" for key, tasks in KBERT_INPUTS.items())
            parser.error(f"no kbert model takes an input named {name!r}; the inputs are {known}")
        inputs.setdefault(name, []).append(text)
    try:
        outputs = predict(args.target, args.model, inputs, args.signature, args.version,
                          timeout=args.timeout)
    except grpc.RpcError as error:
        print(f"grpc_client.py: error: {describe_error(error, args.target)}", file=sys.stderr)
        return 1
    for name, value in outputs.items():
        print(f"{name}: {value.tolist()}")
    return 0


def describe_error(error, target):
    """One line for a failed call: no server, too slow, or what the server refused and why."""
    code, details = error.code(), error.details()
    if code == grpc.StatusCode.UNAVAILABLE:
        return (f"no model server answers at {target} ({details}); is it running, with its gRPC "
                "port (8500 by default) published?")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the model server at {target} did not answer in time (raise --timeout)"
    return f"the model server refused the request: {code.name}: {details}"


if __name__ == "__main__":
    sys.exit(main())
