"""How sparse an encoder's prunable kernels are: `sparsity(model)` and a readable table of it."""

import keras
import numpy as np
from keras import ops

# The dense kernels of a Transformer block that magnitude pruning thins out,
# by name, with the block's attribute (and its attention's) that holds each.
KERNEL_NAMES = ("query", "key", "value", "attention_output", "intermediate", "output")
_ATTENTION_DENSES = {
    "query": "query_dense",
    "key": "key_dense",
    "value": "value_dense",
    "attention_output": "output_dense",
}
_FEEDFORWARD_DENSES = {
    "intermediate": "feedforward_intermediate_dense",
    "output": "feedforward_output_dense",
}


def is_encoder(model):
    """Whether `model` is a `kbert.Encoder`.

    The class is the one Keras registered: compression works on the models
    without importing them (no encoder exists before its module is loaded).
    """
    encoder_class = keras.saving.get_registered_object("kbert>Encoder")
    return encoder_class is not None and isinstance(model, encoder_class)


def find_encoder(model):
    """The `kbert.Encoder` of `model`: the model itself, or its `.encoder`."""
    if is_encoder(model):
        return model
    encoder = getattr(model, "encoder", None)
    if is_encoder(encoder):
        return encoder
    raise TypeError(
        f"Expected a kbert.Encoder or a model with one as `.encoder` (a task model, a "
        f"Pretrainer), got {type(model).__name__}, which has none."
    )


def prunable_kernels(encoder):
    """`(block name, kernel name, variable)` of every prunable kernel, block by block.

    In each distinct Transformer block (ALBERT's shared blocks once): the
    attention's query, key, value and output kernels and the feed-forward's
    intermediate and output kernels. Embeddings, the embedding projection,
    biases, LayerNorm, the pooler and task heads are not among them.
    """
    kernels = []
    for block in encoder.transformer_layers:
        attention = block.self_attention_layer
        for name, attribute in _ATTENTION_DENSES.items():
            kernels.append((block.name, name, getattr(attention, attribute).kernel))
        for name, attribute in _FEEDFORWARD_DENSES.items():
            kernels.append((block.name, name, getattr(block, attribute).kernel))
    return kernels


def _counts(variable):
    """`(nonzero, total)` weights of a variable."""
    value = ops.convert_to_numpy(variable.value)
    return int(np.count_nonzero(value)), int(value.size)


def _entry(nonzero, total):
    return {
        "sparsity": 1.0 - nonzero / total if total else 0.0,
        "nonzero": nonzero,
        "total": total,
    }


def sparsity(model):
    """The sparsity of the prunable kernels of a model's encoder, as a dict.

    The prunable kernels are those `kbert.MagnitudePruning` prunes: in every
    Transformer block, the attention's query, key, value and output kernels
    and the two feed-forward kernels. A weight counts as pruned when it is
    exactly 0.

    Args:
        model: a `kbert.Encoder`, or a model with one as `.encoder` (a task
            model, a `kbert.Pretrainer`), trained, pruned or loaded from
            `.keras`.

    Returns:
        A dict:

        - `sparsity`: the fraction of the prunable weights that are 0;
        - `nonzero`, `total`: the prunable weights that are not 0, and all of them;
        - `encoder_parameters`, `encoder_nonzero`: every weight of the
          encoder (embeddings, biases, LayerNorm and pooler too), and those
          that are not 0;
        - `blocks`: for each Transformer block by name, its own `sparsity`,
          `nonzero` and `total`, and under `kernels` the same for each of
          its kernels (`query`, `key`, `value`, `attention_output`,
          `intermediate`, `output`).

    Example:
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=100, num_layers=1)
    >>> report = kbert.MagnitudePruning.prune(encoder, 0.75)
    >>> report == kbert.compression.sparsity(encoder)
    True
    >>> report["sparsity"], report["total"], sorted(report["blocks"])
    (0.75, 196608, ['transformer_layer_0'])
    >>> print(kbert.compression.format_sparsity(report))
    block / kernel          sparsity      nonzero        total
    transformer_layer_0       75.0 %       49,152      196,608
      query                   75.0 %        4,096       16,384
      key                     75.0 %        4,096       16,384
      value                   75.0 %        4,096       16,384
      attention_output        75.0 %        4,096       16,384
      intermediate            75.0 %       16,384       65,536
      output                  75.0 %       16,384       65,536
    prunable kernels          75.0 %       49,152      196,608
    encoder                   50.8 %      144,512      293,632
    """
    encoder = find_encoder(model)
    blocks = {}
    for block_name, kernel_name, kernel in prunable_kernels(encoder):
        block = blocks.setdefault(block_name, {"nonzero": 0, "total": 0, "kernels": {}})
        nonzero, total = _counts(kernel)
        block["kernels"][kernel_name] = _entry(nonzero, total)
        block["nonzero"] += nonzero
        block["total"] += total
    for name, block in blocks.items():
        blocks[name] = {**_entry(block["nonzero"], block["total"]), "kernels": block["kernels"]}
    nonzero = sum(block["nonzero"] for block in blocks.values())
    total = sum(block["total"] for block in blocks.values())
    encoder_counts = [_counts(weight) for weight in encoder.weights]
    return {
        **_entry(nonzero, total),
        "encoder_parameters": sum(total for _, total in encoder_counts),
        "encoder_nonzero": sum(nonzero for nonzero, _ in encoder_counts),
        "blocks": blocks,
    }


def format_sparsity(report):
    """A `sparsity` report as a table: each block and kernel, the prunable kernels, the encoder."""

    def row(label, nonzero, total):
        share = 100.0 * (1.0 - nonzero / total) if total else 0.0
        return f"{label:<20} {share:>9.1f} % {nonzero:>12,} {total:>12,}"

    lines = [f"{'block / kernel':<20} {'sparsity':>11} {'nonzero':>12} {'total':>12}"]
    for name, block in report["blocks"].items():
        lines.append(row(name, block["nonzero"], block["total"]))
        for kernel_name, kernel in block["kernels"].items():
            lines.append(row(f"  {kernel_name}", kernel["nonzero"], kernel["total"]))
    lines.append(row("prunable kernels", report["nonzero"], report["total"]))
    lines.append(row("encoder", report["encoder_nonzero"], report["encoder_parameters"]))
    return "\n".join(lines)
