"""Reading checkpoint files so that anything malformed fails as one `CheckpointError` naming the file and key.

Every format kbert reads (Hugging Face and ALBERT folders, Google's TF
checkpoints, keras-hub presets) goes through these readers and checks:
JSON configs (`read_json`), their keys (`positive_int`, `rate`,
`one_of`, `boolean`), safetensors files (`read_safetensors`), and
tensors with NaN or infinity in them (`check_finite`).

Sizes a config declares are checked against the tensors before an encoder
is built (`check_sizes_against_tensors`, `check_count_against_tensors`,
`check_weights_against_tensors`), on the shapes a weights file declares
(`read_safetensors_shapes` reads a safetensors header, not its data): a
config that claims 100,000 layers or 20,000,000 positions beside a small
weights file is refused before anything of that size is allocated.
"""

import json
import os

import numpy as np

from kbert.io.safe_loading import MAX_LAYERS, allowed_weights, claimed_key
from kbert.io.text_files import MAX_JSON_DEPTH, json_too_deep

# Configs are a few kilobytes; a bigger file is not a config (and is not read into memory).
MAX_JSON_BYTES = 16 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint file that kbert cannot read: its message is one line naming the file and the key or tensor.

    Attributes:
        path: the file.
        key: the config key or tensor name at fault, or None (a file that does not parse).
        line_number: the 1-based line of a JSON file at fault, or None.
    """

    def __init__(self, path, problem, key=None, line_number=None):
        self.path, self.key, self.line_number = os.fspath(path), key, line_number
        where = self.path if line_number is None else f"{self.path}, line {line_number}"
        super().__init__(f"{where}: {problem}")


def read_json(path):
    """The JSON object of a config file; a `CheckpointError` names the file (and line) when it is not one."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size > MAX_JSON_BYTES:
        raise CheckpointError(path, f"{size:,} bytes is too big for a config (at most {MAX_JSON_BYTES:,}).")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise CheckpointError(path, f"invalid UTF-8 at byte {error.start}.", line_number=line) from None
    line = json_too_deep(data)
    if line is not None:
        raise CheckpointError(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels; refused before parsing it.",
                              line_number=line)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CheckpointError(
            path, f"not valid JSON: {error.msg} (column {error.colno}).", line_number=error.lineno
        ) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise CheckpointError(path, f"not valid JSON: {reason}") from None
    if not isinstance(value, dict):
        raise CheckpointError(path, f"expected a JSON object ({{...}}), found a JSON {_json_type(value)}.")
    return value


def _json_type(value):
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "list", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def shown_value(value, most=60):
    """A config value as the message shows it: its repr, cut short (a key may hold a whole document)."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(config, key, path, default=None):
    """`config[key]` as an int > 0 (JSON numbers like `2.0` too); a `CheckpointError` names the key otherwise."""
    if key not in config:
        if default is None:
            raise CheckpointError(path, f"the required key {key!r} is missing.", key=key)
        return default
    value = config[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not _is_int(value) or value <= 0:
        raise CheckpointError(path, f"{key} must be a positive integer, found {shown_value(value)}.", key=key)
    return value


def rate(config, key, path, default):
    """`config[key]` as a float in [0, 1) (a dropout rate)."""
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise CheckpointError(path, f"{key} must be a number from 0 to below 1, found {shown_value(value)}.", key=key)
    return float(value)


def number(config, key, path, default):
    """`config[key]` as a finite float."""
    value = config.get(key, default)
    try:
        # JSON has ints too big for a float (OverflowError), and NaN and Infinity.
        finite = not isinstance(value, bool) and isinstance(value, (int, float)) and np.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite:
        raise CheckpointError(path, f"{key} must be a number, found {shown_value(value)}.", key=key)
    return float(value)


def one_of(config, key, path, choices, default):
    """`config[key]`, which must be one of `choices`."""
    value = config.get(key, default)
    if value not in choices:
        raise CheckpointError(
            path, f"{key} {shown_value(value)} is not supported; kbert reads {', '.join(map(repr, choices))}.", key=key
        )
    return value


def boolean(config, key, path, default):
    """`config[key]` as a bool (`true`, `false`, or null for the default)."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(path, f"{key} must be true or false, found {shown_value(value)}.", key=key)
    return value


def read_safetensors(path):
    """The tensors of a safetensors file as NumPy arrays, each finite.

    A file that is truncated or not safetensors, or a tensor with NaN or
    infinity, fails with a `CheckpointError` naming the file (and tensor).
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = os.fspath(path)
    try:
        tensors = load_file(path)
    except (SafetensorError, ValueError, TypeError) as error:
        # e.g. "incomplete metadata, file not fully covered" for a truncated file.
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CheckpointError(path, f"not a readable safetensors file (truncated or damaged?): {reason}") from None
    check_finite(tensors, path)
    return tensors


def read_safetensors_shapes(path):
    """`{name: shape}` of a safetensors file, from its header: no tensor is read.

    The header is checked against the file (every tensor's bytes inside
    it), so the shapes are bounded by the file's size. A file that is not
    safetensors fails with the `CheckpointError` of `read_safetensors`.
    """
    from safetensors import SafetensorError, safe_open

    path = os.fspath(path)
    try:
        with safe_open(path, framework="numpy") as file:
            return {name: tuple(file.get_slice(name).get_shape()) for name in file.keys()}
    except (SafetensorError, ValueError, TypeError, OSError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CheckpointError(path, f"not a readable safetensors file (truncated or damaged?): {reason}") from None


def is_float(array):
    # bfloat16 (from ml_dtypes) is a float that NumPy files under kind "V".
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def check_finite(tensors, path):
    """Refuses a checkpoint with NaN or infinity in a float tensor, naming the tensor and the file.

    Such a tensor makes every output it reaches NaN; fine-tuning cannot
    repair it, so it fails here rather than in training.
    """
    for name, value in tensors.items():
        value = np.asarray(value)
        if not is_float(value):
            continue
        finite = np.isfinite(value.astype("float32") if value.dtype.kind != "f" else value)
        if not finite.all():
            bad = int(value.size - np.count_nonzero(finite))
            raise CheckpointError(
                path, f"tensor {name} {tuple(value.shape)} has {bad:,} of {value.size:,} values NaN or "
                "infinite; the checkpoint is damaged.", key=name
            )


def tensor_as_named(name, shape):
    """A tensor as an error names it: its name, and its shape where it has one."""
    return name if shape is None else f"{name} of shape {tuple(shape)}"


def check_sizes_against_tensors(config_path, weights_path, expectations, shapes, shown=tensor_as_named):
    """Checks config sizes against the tensors that hold them, before an encoder of that size is built.

    `expectations` lists `(key, value, tensor_name, axis)`: the tensor must
    be in `shapes` (`{name: shape}`), and its size along `axis` must equal
    the config's value. A config from another model, or one that claims a
    size no tensor holds, fails naming the key, the tensor and its shape,
    instead of building (and allocating) an encoder of that size first.
    `shown(name, shape)` names a tensor as its file does (shape None: a
    tensor the file lacks).
    """
    for key, value, name, axis in expectations:
        shape = shapes.get(name)
        if shape is None:
            raise CheckpointError(
                config_path, f"{key} is {value}, but {weights_path} holds no {shown(name, None)} to hold it; "
                "the config and the weights disagree.", key=key
            )
        if len(shape) <= axis:
            continue  # an odd tensor is named when the weights are assigned
        if shape[axis] != value:
            raise CheckpointError(
                config_path, f"{key} is {value}, but {weights_path} holds {shown(name, shape)}; the config and "
                "the weights disagree.", key=key
            )


def check_count_against_tensors(config_path, weights_path, key, value, shapes, pattern):
    """Checks a count in the config (layers, groups) against the tensor names: `pattern` captures the index.

    Every index below the count must have tensors; a run 0..n-1 of another
    length than the count is refused too (a stray index beyond the count is
    named when the weights are assigned).
    """
    import re

    indices = {int(m.group(1)) for m in map(re.compile(pattern).match, shapes) if m}
    whole_run = indices == set(range(len(indices)))
    if value > len(indices) or (whole_run and len(indices) != value):
        raise CheckpointError(
            config_path, f"{key} is {value}, but {weights_path} holds tensors for {len(indices)}; "
            "the config and the weights disagree.", key=key
        )
    absent = next((i for i in range(value) if i not in indices), None)
    if absent is not None:
        raise CheckpointError(
            config_path, f"{key} is {value}, but {weights_path} holds no tensors for number {absent}; "
            "the config and the weights disagree.", key=key
        )


def check_layer_count(config_path, key, num_layers, repetitions=1):
    """Refuses more Transformer layers than kbert builds from a file (`MAX_LAYERS`).

    Shared layers (ALBERT's groups) are in no tensor's shape: only this bounds the time to build them.
    """
    if num_layers * repetitions > MAX_LAYERS:
        raise CheckpointError(
            config_path, f"{key} is {num_layers}: {num_layers * repetitions:,} Transformer layers, over the "
            f"{MAX_LAYERS:,} kbert builds from a checkpoint.", key=key
        )


def check_weights_against_tensors(config_path, weights_path, count, sizes, shapes=None, held=None, keys=None):
    """The weights a config implies must not exceed those the tensors hold, before an encoder is built.

    `count(sizes)` is a lower bound on the weights an encoder of the config
    keys' `sizes` has (`kbert.io.safe_loading.encoder_weight_count`);
    `shapes` are the weights file's tensors (or `held` their number of
    values). The error names the key (of `keys`, all by default) that the
    claim rests on most.
    """
    needed = count(sizes)
    if held is None:
        held = sum(int(np.prod(shape, dtype=object)) for shape in shapes.values())
    if needed > allowed_weights(held):
        key = claimed_key(count, sizes, list(sizes) if keys is None else keys)
        raise CheckpointError(
            config_path, f"{key} is {sizes[key]}: the config makes an encoder of at least {needed:,} weights, "
            f"but {weights_path} holds {held:,}; the config and the weights disagree.", key=key
        )


def check_required(config, keys, path, model):
    """All of `keys` must be in the config; the error lists every one missing."""
    missing = [key for key in keys if key not in config]
    if missing:
        raise CheckpointError(path, f"the {model} config lacks {', '.join(missing)}.", key=missing[0])
