"""Every REST request in saved_models/README.rst gets the documented response from an exported model."""

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

README = Path(__file__).parents[2] / "saved_models" / "README.rst"


def documented_examples():
    """`[(kind, request, response or None)]` from the README's `.. rest-request:` blocks."""
    text = README.read_text()
    blocks = re.findall(r"\.\. rest-(request|response): (\w+)\n\n\.\. code-block:: json\n\n    (.+?)\n", text)
    examples = []
    for role, kind, body in blocks:
        if role == "request":
            examples.append([kind, json.loads(body), None])
        else:
            assert examples and examples[-1][0] == kind, f"a response for {kind} without its request"
            examples[-1][2] = json.loads(body)
    return examples


def plain(value):
    value = value.numpy()
    if value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value).tolist()
    return value.tolist()


def rest_predict(signatures, body):
    """TF Serving's REST `:predict` on a loaded SavedModel: row (`instances`) or columnar (`inputs`) format."""
    signature = signatures[body.get("signature_name", "serving_default")]
    names = sorted(signature.structured_input_signature[1])

    def decode(value):
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    if "instances" in body:
        rows = body["instances"]
        columns = ({name: [decode(row[name]) for row in rows] for name in names}
                   if isinstance(rows[0], dict) else {names[0]: decode(rows)})
    else:
        inputs = body["inputs"]
        columns = {name: decode(inputs[name]) for name in names} if isinstance(inputs, dict) else {names[0]: inputs}
    outputs = {name: plain(value) for name, value in signature(**{
        name: tf.constant(value, tf.string) for name, value in columns.items()}).items()}
    if "inputs" in body:
        return {"outputs": outputs}
    count = len(next(iter(columns.values())))
    return {"predictions": [{name: value[i] for name, value in outputs.items()} for i in range(count)]}


def shape(value):
    """The keys and nesting of a JSON value, without its numbers, strings and list lengths."""
    if isinstance(value, dict):
        return {key: shape(v) for key, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return "string" if isinstance(value, str) else "number"


@pytest.mark.parametrize("index", range(len(documented_examples())))
def test_the_documented_request_gets_the_documented_response(exported, index):
    kind, request, documented = documented_examples()[index]
    _, path = exported[kind]
    response = rest_predict(tf.saved_model.load(path).signatures, request)
    if documented is not None:
        assert shape(response) == shape(documented)
        if "predictions" in documented:
            assert len(response["predictions"]) == len(documented["predictions"]) == len(request["instances"])
    else:
        assert response["predictions"] and "probabilities" in response["predictions"][0]
