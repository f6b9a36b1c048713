"""kbert encoder weights <-> checkpoint tensors under Hugging Face's BERT names.

Each encoder variable is matched by its stable path (`"transformer_layer_3/
self_attention_layer/query/kernel"`) to one checkpoint tensor. Dense kernels
are stored `(out, in)` in the checkpoint and `(in, ...)` here: they are
transposed, then reshaped to the variable's shape (the attention kernels are
split by head here, `(hidden, heads, head_dim)`); every other tensor is only
reshaped.
"""

import re

import numpy as np

from kbert.checkpoints.checkpoint_files import CheckpointError, is_float

_EMBEDDINGS = {
    "token_embedding/embeddings": "embeddings.word_embeddings.weight",
    "position_embedding/embeddings": "embeddings.position_embeddings.weight",
    "segment_embedding/embeddings": "embeddings.token_type_embeddings.weight",
    "embeddings_layer_norm/gamma": "embeddings.LayerNorm.weight",
    "embeddings_layer_norm/beta": "embeddings.LayerNorm.bias",
    "pooler_dense/kernel": "pooler.dense.weight",
    "pooler_dense/bias": "pooler.dense.bias",
}
_LAYER = {
    "self_attention_layer/query": "attention.self.query",
    "self_attention_layer/key": "attention.self.key",
    "self_attention_layer/value": "attention.self.value",
    "self_attention_layer/attention_output": "attention.output.dense",
    "self_attention_layer_norm": "attention.output.LayerNorm",
    "feedforward_intermediate_dense": "intermediate.dense",
    "feedforward_output_dense": "output.dense",
    "feedforward_layer_norm": "output.LayerNorm",
}
_SUFFIX = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}
# Tensors a BertModel checkpoint may hold that the encoder does not use.
IGNORED = ("embeddings.position_ids",)


def checkpoint_name(variable_path):
    """The checkpoint tensor name of an encoder variable path."""
    if variable_path in _EMBEDDINGS:
        return _EMBEDDINGS[variable_path]
    match = re.fullmatch(r"transformer_layer_(\d+)/(.+)/(kernel|bias|gamma|beta)", variable_path)
    if match and match.group(2) in _LAYER:
        layer, part, kind = match.groups()
        return f"encoder.layer.{layer}.{_LAYER[part]}.{_SUFFIX[kind]}"
    raise KeyError(f"No checkpoint name for the encoder variable {variable_path!r}.")


def _variable_path(variable, encoder):
    # Paths start with the encoder's own name when it is nested in a task model.
    path = variable.path
    prefix = encoder.name + "/"
    return path[len(prefix):] if path.startswith(prefix) else path


def _is_dense_kernel(path):
    return path.endswith("/kernel")


def encoder_tensors(encoder, name_of=checkpoint_name):
    """The encoder's weights as checkpoint tensors (float32 NumPy, Hugging Face layouts).

    `name_of` maps a variable path to its tensor name (BERT's names by default).
    """
    tensors = {}
    for variable in encoder.weights:
        path = _variable_path(variable, encoder)
        value = np.asarray(variable.numpy(), dtype="float32")
        if _is_dense_kernel(path):
            # (in, ...) or (heads, head_dim, out): flatten to (in, out), then transpose.
            value = value.reshape(-1, value.shape[-1]) if path.endswith("attention_output/kernel") else (
                value.reshape(value.shape[0], -1)
            )
            value = value.T
        elif not path.endswith("/embeddings"):
            value = value.reshape(-1)  # biases split by head here are flat there
        tensors[name_of(path)] = value
    return tensors


def _is_bert_extra(name):
    return name in IGNORED or name.startswith("cls.")


def set_encoder_tensors(encoder, tensors, source, name_of=checkpoint_name, is_extra=_is_bert_extra):
    """Assigns checkpoint tensors to the encoder's variables.

    Every variable must get a tensor of a matching size and every tensor must
    be used (except those `is_extra` accepts: for BERT the `IGNORED` ones and
    the pretraining heads, `cls.*`); otherwise a `CheckpointError` (a
    `ValueError`) names `source` (the weights file), the tensors and both
    shapes, on one line. `name_of` maps a variable path to its tensor name
    (BERT's names by default).
    """
    used, problems, values = set(), [], []
    for variable in encoder.weights:
        path = _variable_path(variable, encoder)
        name = name_of(path)
        if name not in tensors:
            problems.append(f"missing tensor {name} (for {path}, shape {tuple(variable.shape)})")
            values.append(None)
            continue
        used.add(name)
        value = np.asarray(tensors[name])
        expected = tuple(variable.shape)
        if not is_float(value):
            problems.append(f"{name} has dtype {value.dtype}; {path} needs floating point")
            values.append(None)
            continue
        if _is_dense_kernel(path):
            if value.ndim != 2:
                problems.append(f"{name} has shape {value.shape}; {path} needs a matrix for {expected}")
                values.append(None)
                continue
            value = value.T
        if value.size != int(np.prod(expected)) or (
            _is_dense_kernel(path) and value.shape[0] != _rows(path, expected)
        ):
            problems.append(f"{name} has shape {tuple(tensors[name].shape)}; {path} has {expected}")
            values.append(None)
            continue
        values.append(value.reshape(expected))
    unknown = sorted(name for name in tensors if name not in used and not is_extra(name))
    problems += [f"unknown tensor {name} of shape {tuple(np.shape(tensors[name]))}" for name in unknown]
    if problems:
        raise CheckpointError(source, f"does not fit the encoder: {_listed(problems)}", key=_first_name(problems))
    for variable, value in zip(encoder.weights, values):
        variable.assign(value.astype(variable.dtype))


def _listed(problems, most=6):
    """Problems on one line (a CLI error is one line), the first few in full."""
    shown = "; ".join(problems[:most])
    return shown + (f"; and {len(problems) - most} more" if len(problems) > most else "") + "."


def _first_name(problems):
    # The tensor named by the first problem ("missing tensor X ...", "X has shape ...").
    words = problems[0].removeprefix("missing tensor ").removeprefix("unknown tensor ").split()
    return words[0] if words else None


def _rows(path, shape):
    # The input size a kernel's checkpoint matrix must have after transposing.
    if path.endswith("attention_output/kernel"):
        return shape[0] * shape[1]
    return shape[0]


# The pretraining heads: kbert.Pretrainer variable path -> checkpoint name.
_HEADS = {
    "masked_lm_head/intermediate_dense/kernel": "cls.predictions.transform.dense.weight",
    "masked_lm_head/intermediate_dense/bias": "cls.predictions.transform.dense.bias",
    "masked_lm_head/intermediate_layer_norm/gamma": "cls.predictions.transform.LayerNorm.weight",
    "masked_lm_head/intermediate_layer_norm/beta": "cls.predictions.transform.LayerNorm.bias",
    "masked_lm_head/output_bias": "cls.predictions.bias",
    "next_sentence_head/kernel": "cls.seq_relationship.weight",
    "next_sentence_head/bias": "cls.seq_relationship.bias",
}
MASKED_LM_TENSOR = _HEADS["masked_lm_head/output_bias"]
NEXT_SENTENCE_TENSOR = _HEADS["next_sentence_head/kernel"]


def set_head_tensors(pretrainer, tensors, source, names=_HEADS):
    """Assigns a checkpoint's masked-LM and next-sentence head tensors to a `kbert.Pretrainer`.

    The output projection is the token embedding (tied), so
    `cls.predictions.decoder.*` is not read. `names` maps the Pretrainer's
    variable paths to tensor names (BERT's by default).
    """
    problems, assignments = [], []
    for variable in pretrainer.weights:
        name = names.get(variable.path)
        if name is None:
            continue
        if name not in tensors:
            problems.append(f"missing tensor {name} (for {variable.path}, shape {tuple(variable.shape)})")
            continue
        value = np.asarray(tensors[name])
        if not is_float(value):
            problems.append(f"{name} has dtype {value.dtype}; {variable.path} needs floating point")
            continue
        value = value.T if variable.path.endswith("/kernel") else value
        if value.shape != tuple(variable.shape):
            problems.append(
                f"{name} has shape {tuple(np.shape(tensors[name]))}; {variable.path} has "
                f"{tuple(variable.shape)}"
            )
            continue
        assignments.append((variable, value))
    if problems:
        raise CheckpointError(
            source, f"the pretraining heads do not fit: {_listed(problems)}", key=_first_name(problems)
        )
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))


def head_tensors(pretrainer, names=_HEADS):
    """A `kbert.Pretrainer`'s head weights as checkpoint tensors (Hugging Face layouts)."""
    tensors = {}
    for variable in pretrainer.weights:
        name = names.get(variable.path)
        if name is not None:
            value = np.asarray(variable.numpy(), dtype="float32")
            tensors[name] = value.T if variable.path.endswith("/kernel") else value
    return tensors
