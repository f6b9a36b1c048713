"""The `kbert.Encoder`'s arguments: their checks, and which blocks each layer applies."""

import numbers

# The feed-forward activations: BERT's exact (erf) GELU, and the tanh
# approximation ALBERT v2 checkpoints were trained with ("gelu_new").
ACTIVATIONS = ("gelu", "gelu_approximate")


def layer_block_indices(num_layers, num_groups, num_inner_repetitions):
    """For each layer, the indices of the distinct blocks it applies, in order.

    The distinct blocks are stored group by group: group g holds blocks
    `g * num_inner_repetitions` up to `(g + 1) * num_inner_repetitions`. The
    `num_layers` layers fall into `num_groups` equal runs of
    `num_layers // num_groups`, and every layer of run g applies all of
    group g's blocks. BERT (`num_groups=num_layers`, one repetition) gives
    each layer its own block; ALBERT-base (12 layers, 1 group) gives every
    layer block 0.

    Example:
    >>> layer_block_indices(4, 2, 1)
    [[0], [0], [1], [1]]
    >>> layer_block_indices(2, 1, 2)
    [[0, 1], [0, 1]]
    """
    layers_per_group = num_layers // num_groups
    return [
        list(range(group * num_inner_repetitions, (group + 1) * num_inner_repetitions))
        for group in (layer // layers_per_group for layer in range(num_layers))
    ]


def check_encoder_arguments(*, activation, dropout, attention_dropout, **sizes):
    """Raises a ValueError naming the first `Encoder` argument out of its range (`sizes`: its positive integers)."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) != value or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    num_layers, num_groups = sizes["num_layers"], sizes["num_groups"]
    hidden_dim, num_heads = sizes["hidden_dim"], sizes["num_heads"]
    if num_layers % num_groups:
        raise ValueError(
            f"`num_groups` ({num_groups}) must divide `num_layers` ({num_layers}): each group "
            "is an equal run of layers."
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {ACTIVATIONS}, got {activation!r}.")
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` ({num_heads})."
        )
    for name, rate in [("dropout", dropout), ("attention_dropout", attention_dropout)]:
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError(f"`{name}` must be in [0, 1), got {rate!r}.")


def checked_heads_per_layer(heads_per_layer, num_layers, num_heads, shared):
    """`heads_per_layer` as a list of ints, or a clear error naming what is wrong."""
    if shared:
        raise ValueError(
            "`heads_per_layer` is not supported with shared layers (ALBERT's `num_groups` or "
            "`num_inner_repetitions`): the layers of a group share one attention layer."
        )
    if isinstance(heads_per_layer, (str, bytes)) or not hasattr(heads_per_layer, "__len__"):
        raise ValueError(f"`heads_per_layer` must be a list of {num_layers} integers, got {heads_per_layer!r}.")
    if len(heads_per_layer) != num_layers:
        raise ValueError(
            f"`heads_per_layer` must give one head count per layer ({num_layers}), got "
            f"{len(heads_per_layer)}: {list(heads_per_layer)}."
        )
    for layer, heads in enumerate(heads_per_layer):
        if isinstance(heads, bool) or not isinstance(heads, numbers.Real) or int(heads) != heads \
                or not 1 <= heads <= num_heads:
            raise ValueError(
                f"`heads_per_layer[{layer}]` must be an integer from 1 to `num_heads` ({num_heads}), "
                f"got {heads!r}."
            )
    return [int(heads) for heads in heads_per_layer]
