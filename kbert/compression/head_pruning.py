"""Attention-head pruning by importance (Michel, Levy and Neubig, 2019, "Are Sixteen Heads Really Better than One?").

A head's importance is how much the task loss changes when the head's output
is scaled: `I_h = |dL/dxi_h|`, where `xi_h` multiplies head h's output (1 in
the model as it is). Heads of low importance are removed for real: the
pruned encoder has fewer heads in those layers (`kbert.Encoder`'s
`heads_per_layer`), so its attention computes less and it has fewer weights.

The pieces:

- `head_importance(model, x, y)`: every head's importance on a task's data;
- `least_important_heads(importance, fraction)`: the heads to remove;
- `prune_heads(model, heads)` or `prune_heads(model, fraction=..., x=..., y=...)`:
  a new model without those heads;
- `mask_heads(model, heads)`: a copy of the model whose removed heads
  contribute nothing, with all its shapes (what the pruned model computes).
"""

import numbers

import keras
import numpy as np
from keras import ops

from kbert.backend import gradient_function
from kbert.compression.sparsity import is_encoder

# The attention layer's projections whose kernel and bias have a head axis,
# with that axis: query, key and value kernels are (hidden, heads, head size)
# and their biases (heads, head size); the output kernel is (heads, head size,
# hidden). The output bias has no head axis.
_HEAD_AXES = {
    "query/kernel": 1,
    "query/bias": 0,
    "key/kernel": 1,
    "key/bias": 0,
    "value/kernel": 1,
    "value/bias": 0,
    "attention_output/kernel": 0,
}


def head_importance(model, x, y=None, batch_size=None, normalize=True):
    """The importance of every attention head of a task model on data (Michel et al., 2019).

    For each batch of `x` (and `y`), the gradient of the model's compiled
    loss (dropout off) with respect to a mask `xi_h` on each head's output;
    a head's importance is the sum over batches of the gradient's absolute
    value. With a batch of one example, as in the paper, this is the sum
    over examples of `|dL(x)/dxi_h|`; larger batches average the gradient
    over their examples first (and run faster).

    The gradient is read off the attention output kernel, with no change to
    the model: a head's output reaches the layer's output only through its
    slice `W_o[h]` (head size x hidden) of that kernel, so scaling the
    output by `xi_h` scales that slice, and `dL/dxi_h = sum(dL/dW_o[h] *
    W_o[h])`.

    Args:
        model: a kbert task model (e.g. a `kbert.Classifier`), compiled
            with its loss; its encoder's layers must not be shared (ALBERT).
        x: the inputs, in any form the model's `fit` takes (texts, text
            pairs, ... or a `tf.data.Dataset` of `(inputs, targets)`).
        y: the targets, when they are not part of `x`.
        batch_size: examples per batch; default the preprocessor's.
        normalize: divide each layer's importances by their L2 norm, as
            Michel et al. do, so that layers compare.

    Returns:
        A float NumPy array `(num_layers, num_heads)`; `[l, h]` is head h of
        layer l. In a head-pruned encoder, layer l has
        `heads_per_layer[l]` heads, numbered from 0 in the order they were
        kept; the places after them hold NaN.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40, verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> importance = kbert.compression.head_importance(clf, ["a good film", "a bad film"], [1, 0])
    >>> importance.shape
    (2, 2)
    """
    encoder = _task_encoder(model)
    _check_unshared(encoder)
    if getattr(model, "_compile_loss", None) is None:
        raise ValueError("`head_importance` needs the model's loss: compile the model with one.")
    kernels = [block.self_attention_layer.output_dense.kernel for block in encoder.transformer_layers]

    def loss(features, targets, sample_weight):
        predictions = model(features, training=False)
        return model.compute_loss(
            x=features, y=targets, y_pred=predictions, sample_weight=sample_weight, training=False
        )

    kernel_gradients = gradient_function(loss, kernels)
    importance = np.full((encoder.num_layers, encoder.num_heads), np.nan)
    totals = [np.zeros(int(kernel.shape[0])) for kernel in kernels]
    batches = 0
    for batch in _batches(model, x, y, batch_size):
        features, targets, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
        if targets is None:
            raise ValueError("`head_importance` needs targets: give `y`, or a dataset of (inputs, targets).")
        gradients = kernel_gradients(features, targets, sample_weight)
        for total, gradient, kernel in zip(totals, gradients, kernels):
            # dL/dxi_h = sum over head h's slice of dL/dW_o * W_o (see the docstring).
            head = ops.sum(ops.cast(gradient, "float32") * ops.cast(kernel.value, "float32"), axis=[1, 2])
            total += np.abs(ops.convert_to_numpy(head))
        batches += 1
    if not batches:
        raise ValueError("`head_importance` got no examples.")
    for layer, total in enumerate(totals):
        if normalize:
            norm = np.linalg.norm(total)
            total = total / norm if norm > 0 else total
        importance[layer, : len(total)] = total
    return importance


def least_important_heads(importance, fraction):
    """The `fraction` of all heads with the lowest importance, keeping at least one head in every layer.

    Heads are compared across layers (normalise the importances per layer
    first, as `head_importance` does by default); NaN places (heads pruned
    already) are skipped. `round(fraction * heads)` heads are chosen; when a
    layer is down to one head, its last head stays and the next least
    important head elsewhere is taken instead.

    Args:
        importance: an array `(num_layers, num_heads)`, as `head_importance` gives.
        fraction: the share of the heads to remove, in [0, 1).

    Returns:
        `{layer: [head, ...]}`, the heads to remove (for `prune_heads`); layers
        that lose none are left out.

    Example:
    >>> least_important_heads(np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3]]), fraction=0.5)
    {0: [1], 1: [0, 2]}
    """
    importance = np.asarray(importance, "float64")
    if importance.ndim != 2:
        raise ValueError(f"`importance` must be an array (num_layers, num_heads), got shape {importance.shape}.")
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 <= fraction < 1:
        raise ValueError(f"`fraction` must be a number in [0, 1), got {fraction!r}.")
    present = ~np.isnan(importance)
    remaining = present.sum(axis=1)
    wanted = int(round(fraction * int(present.sum())))
    removable = int(np.sum(np.maximum(remaining - 1, 0)))
    if wanted > removable:
        raise ValueError(
            f"`fraction` {fraction} asks for {wanted} of {int(present.sum())} heads, but only {removable} "
            "can go: every layer keeps at least one head."
        )
    layers, heads = np.nonzero(present)
    order = np.argsort(importance[layers, heads], kind="stable")
    chosen = {}
    for index in order:
        if wanted == 0:
            break
        layer, head = int(layers[index]), int(heads[index])
        if remaining[layer] > 1:
            chosen.setdefault(layer, []).append(head)
            remaining[layer] -= 1
            wanted -= 1
    return {layer: sorted(chosen[layer]) for layer in sorted(chosen)}


def prune_heads(model, heads=None, fraction=None, importance=None, x=None, y=None, batch_size=None):
    """A new model without some attention heads: smaller and faster, otherwise the same.

    Give the heads to remove, `heads={layer: [head, ...]}`, or a `fraction`
    of all heads: the least important ones (`least_important_heads`) by
    `importance`, which is computed on `x` and `y` with `head_importance`
    when not given.

    The new model is of the model's class (a task model or a
    `kbert.Encoder`) with the same configuration, except that its encoder's
    `heads_per_layer` counts the heads left. Its weights are the model's:
    the query, key and value projections and the attention output kernel
    lose the removed heads' slices; every other weight is copied. It
    computes what `mask_heads(model, heads)` computes, has
    `model.count_params()` minus `4 * (hidden_dim // num_heads) *
    hidden_dim + 3 * (hidden_dim // num_heads)` weights per removed head,
    trains with `fit` (a task model is compiled as the model was, with a
    fresh optimizer), saves as `.keras` and exports with `kbert.export`.
    The model itself is not changed.

    Heads are numbered in each layer from 0 to its head count minus one;
    in a model pruned before, that is the order of the heads it kept.

    Args:
        model: a kbert task model or a `kbert.Encoder`, without shared
            layers (ALBERT).
        heads: `{layer: [head, ...]}`, the heads to remove.
        fraction: instead of `heads`, the share of all heads to remove, in [0, 1).
        importance: with `fraction`, the heads' importance, as
            `head_importance` gives it; default computed on `x` and `y`.
        x, y, batch_size: with `fraction` and no `importance`, the data to
            compute the importance on (see `head_importance`).

    Returns:
        The new model.

    Raises:
        ValueError: a layer or head index out of range, a layer that would
            lose all its heads, or shared layers.

    Example:
    >>> encoder = kbert.Encoder(vocabulary_size=50, num_layers=2, hidden_dim=16, num_heads=4,
    ...                         intermediate_dim=32, max_sequence_length=16)
    >>> pruned = kbert.prune_heads(encoder, {0: [1, 3], 1: [0]})
    >>> pruned.heads_per_layer, encoder.count_params() - pruned.count_params()
    ([2, 3], 804)
    """
    encoder = model if is_encoder(model) else _task_encoder(model)
    if getattr(encoder, "lora", None) is not None:
        raise ValueError("This encoder has LoRA adapters beside its frozen kernels: prune the heads of "
                         "`model.merge_lora()`, whose kernels hold them.")
    if (heads is None) == (fraction is None):
        raise ValueError("Give `prune_heads` either `heads` ({layer: [head, ...]}) or a `fraction`.")
    if fraction is not None:
        if importance is None:
            if x is None:
                raise ValueError(
                    "With `fraction`, give `importance` (see `head_importance`) or the data `x` (and `y`) "
                    "to compute it on."
                )
            importance = head_importance(model, x, y, batch_size=batch_size)
        importance = np.asarray(importance)
        if importance.shape != (encoder.num_layers, encoder.num_heads):
            raise ValueError(
                f"`importance` must have shape {(encoder.num_layers, encoder.num_heads)} (layers, heads), "
                f"got {importance.shape}."
            )
        heads = least_important_heads(importance, fraction)
    removed = _checked_heads(encoder, heads)
    kept_heads = {
        layer: [h for h in range(count) if h not in removed.get(layer, ())]
        for layer, count in enumerate(_heads_per_layer(encoder))
    }
    empty = [layer for layer, kept in kept_heads.items() if not kept]
    if empty:
        raise ValueError(
            f"Removing {heads} would leave layer {empty[0]} without attention heads; every layer keeps at "
            "least one."
        )
    config = encoder.get_config()
    config["heads_per_layer"] = [len(kept_heads[layer]) for layer in range(encoder.num_layers)]
    pruned = _rebuilt(model, type(encoder).from_config(config))

    pruned_encoder = pruned if is_encoder(pruned) else pruned.encoder
    attention_variables = {
        id(variable): (layer, name)
        for layer, block in enumerate(pruned_encoder.transformer_layers)
        for name, variable in _head_variables(block).items()
    }
    for source, target in _paired_weights(model, pruned):
        value = source.numpy()
        if id(target) in attention_variables:
            layer, name = attention_variables[id(target)]
            value = np.take(value, kept_heads[layer], axis=_HEAD_AXES[name])
        target.assign(value)
    return pruned


def mask_heads(model, heads):
    """A copy of the model in which some attention heads contribute nothing: the slices of the attention output kernel that read them are zero.

    The copy has the model's shapes; it computes what `prune_heads(model,
    heads)` computes, with all the heads' work still done. Useful to check
    a pruning, or to compare it with the pruned model's speed.

    Args:
        model: a kbert task model or a `kbert.Encoder`.
        heads: `{layer: [head, ...]}`, the heads to silence.

    Returns:
        The new model (the model itself is not changed).

    Example:
    >>> encoder = kbert.Encoder(vocabulary_size=50, num_layers=1, hidden_dim=16, num_heads=4,
    ...                         intermediate_dim=32, max_sequence_length=16)
    >>> masked = kbert.compression.mask_heads(encoder, {0: [2]})
    >>> kernel = masked.transformer_layers[0].self_attention_layer.output_dense.kernel.numpy()
    >>> float(np.abs(kernel[2]).max()), bool(np.abs(kernel[1]).max() > 0)
    (0.0, True)
    """
    encoder = model if is_encoder(model) else _task_encoder(model)
    removed = _checked_heads(encoder, heads)
    copy = _rebuilt(model, type(encoder).from_config(encoder.get_config()))
    for source, target in _paired_weights(model, copy):
        target.assign(source.numpy())
    copy_encoder = copy if is_encoder(copy) else copy.encoder
    for layer, dropped in removed.items():
        kernel = copy_encoder.transformer_layers[layer].self_attention_layer.output_dense.kernel
        value = kernel.numpy()
        value[sorted(dropped)] = 0
        kernel.assign(value)
    return copy


def _task_encoder(model):
    encoder = getattr(model, "encoder", None)
    if not is_encoder(encoder) or not hasattr(model, "preprocessor"):
        raise TypeError(
            f"Expected a kbert task model (a model with an `encoder` and a `preprocessor`), got "
            f"{type(model).__name__}."
        )
    return encoder


def _batches(model, x, y, batch_size):
    """Batches of `(features, targets[, sample_weight])`: token ids as they are, other inputs through the task's pipeline."""
    from kbert.backend.model_inputs import KERAS_DEFAULT_BATCH_SIZE, is_token_ids

    if not is_token_ids(x):
        return model._task_dataset(x, y, batch_size=batch_size)
    if not isinstance(x, dict):
        return x  # batches already
    size = batch_size or KERAS_DEFAULT_BATCH_SIZE
    count = len(next(iter(x.values())))
    return [
        keras.tree.map_structure(lambda value: value[start : start + size], (x, y))
        for start in range(0, count, size)
    ]


def _check_unshared(encoder):
    if len(encoder.transformer_layers) != encoder.num_layers:
        raise ValueError(
            f"The encoder {encoder.name!r} shares its Transformer blocks across layers (ALBERT's "
            f"num_groups={encoder.num_groups}, num_inner_repetitions={encoder.num_inner_repetitions}); "
            "its heads cannot be scored or removed layer by layer."
        )


def _heads_per_layer(encoder):
    return encoder.heads_per_layer or [encoder.num_heads] * encoder.num_layers


def _checked_heads(encoder, heads):
    """`heads` as `{layer: set of heads}`, or a ValueError naming the indices out of range."""
    _check_unshared(encoder)
    if not isinstance(heads, dict):
        raise TypeError(f"`heads` must be a dict {{layer: [head, ...]}}, got {type(heads).__name__}.")
    counts = _heads_per_layer(encoder)
    checked = {}
    for layer, indices in heads.items():
        if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) or not 0 <= layer < len(counts):
            raise ValueError(f"Layer {layer!r} of `heads` is not a layer of the encoder: 0 to {len(counts) - 1}.")
        indices = list(indices)
        wrong = [
            h for h in indices
            if isinstance(h, bool) or not isinstance(h, numbers.Integral) or not 0 <= h < counts[layer]
        ]
        if wrong:
            raise ValueError(
                f"Heads {wrong} of layer {layer} are out of range: the layer has heads 0 to {counts[layer] - 1}."
            )
        if indices:
            checked[int(layer)] = {int(h) for h in indices}
    return checked


def _head_variables(block):
    """A block's attention variables with a head axis, by their names in `_HEAD_AXES`."""
    attention = block.self_attention_layer
    layers = {
        "query": attention.query_dense,
        "key": attention.key_dense,
        "value": attention.value_dense,
        "attention_output": attention.output_dense,
    }
    variables = {}
    for layer_name, layer in layers.items():
        variables[f"{layer_name}/kernel"] = layer.kernel
        if layer_name != "attention_output":
            variables[f"{layer_name}/bias"] = layer.bias
    return variables


def _rebuilt(model, encoder):
    """A new model of `model`'s class and configuration on `encoder` (fresh weights), compiled as `model` is."""
    if is_encoder(model):
        return encoder
    config = model.get_config()
    config["encoder"] = encoder
    rebuilt = type(model).from_config(config)
    compile_config = model.get_compile_config() if model.compiled else None
    if compile_config:
        rebuilt.compile_from_config(compile_config)
    return rebuilt


def _paired_weights(source, target):
    """The two models' weights side by side; the models are built alike, so they come in the same order."""
    pairs = list(zip(source.weights, target.weights))
    if len(source.weights) != len(target.weights) or any(a.path != b.path for a, b in pairs):
        raise ValueError(f"The weights of {source.name!r} and its rebuilt copy do not line up.")
    return pairs


__all__ = ["head_importance", "least_important_heads", "mask_heads", "prune_heads"]
