"""Encoder sizes: the BERT paper's base and large, the smaller BERTs of Turc et
al. (2019), "Well-Read Students Learn Better" (tiny to medium), and ALBERT's
four (Lan et al., 2019).

L is `num_layers`, H `hidden_dim`, A `num_heads`, I `intermediate_dim` (4H),
E `embedding_size` (H for BERT, 128 for ALBERT). ALBERT presets share one set
of block weights across all layers (`num_groups=1`) and use GELU's tanh form,
as ALBERT's published (v2) checkpoints do.
"""

PRESETS = {
    "tiny": {"num_layers": 2, "hidden_dim": 128, "num_heads": 2},
    "mini": {"num_layers": 4, "hidden_dim": 256, "num_heads": 4},
    "small": {"num_layers": 4, "hidden_dim": 512, "num_heads": 8},
    "medium": {"num_layers": 8, "hidden_dim": 512, "num_heads": 8},
    "base": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12},
    "large": {"num_layers": 24, "hidden_dim": 1024, "num_heads": 16},
    "albert-base": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12},
    "albert-large": {"num_layers": 24, "hidden_dim": 1024, "num_heads": 16},
    "albert-xlarge": {"num_layers": 24, "hidden_dim": 2048, "num_heads": 16},
    "albert-xxlarge": {"num_layers": 12, "hidden_dim": 4096, "num_heads": 64},
}
for _name, _preset in PRESETS.items():
    _preset["intermediate_dim"] = 4 * _preset["hidden_dim"]
    if _name.startswith("albert-"):
        _preset.update(embedding_size=128, num_groups=1, activation="gelu_approximate")


def preset_config(name):
    """The encoder arguments of a preset, or a clear error for an unknown name."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; the presets are {list(PRESETS)}.")
    return dict(PRESETS[name])


def encoder_parameter_count(
    vocabulary_size,
    num_layers,
    hidden_dim,
    intermediate_dim,
    max_sequence_length=512,
    num_segments=2,
    embedding_size=None,
    num_groups=None,
    num_inner_repetitions=1,
    num_heads=None,
    heads_per_layer=None,
    **unused,
):
    """Weights of an encoder of these arguments, counted from its shapes (pooler included).

    It takes the `kbert.Encoder`'s size arguments (more than ten), so that
    `encoder_parameter_count(**encoder.get_config())` counts an encoder.

    With `heads_per_layer` (a head-pruned encoder) `num_heads` is needed too:
    a layer with k heads has attention projections k / `num_heads` as wide.
    """
    h, i = hidden_dim, intermediate_dim
    e = h if embedding_size is None else embedding_size
    blocks = (num_layers if num_groups is None else num_groups) * num_inner_repetitions
    embeddings = (vocabulary_size + max_sequence_length + num_segments) * e + 2 * e
    projection = 0 if e == h else e * h + h
    feed_forward = h * i + i + i * h + h
    layer_norms = 2 * 2 * h
    pooler = h * h + h
    if heads_per_layer is None:
        attention = blocks * 4 * (h * h + h)
    else:
        if num_heads is None:
            raise ValueError("Counting the weights of `heads_per_layer` needs `num_heads`.")
        # Query, key and value map H to k heads of H / A, with biases; the output maps them back to H.
        widths = [k * (h // num_heads) for k in heads_per_layer]
        attention = sum(3 * (h * w + w) + w * h + h for w in widths)
    return embeddings + projection + attention + blocks * (feed_forward + layer_norms) + pooler


def parameter_count(name, vocabulary_size, max_sequence_length=512, num_segments=2):
    """Weights of a preset encoder, counted from its shapes (pooler included)."""
    return encoder_parameter_count(
        vocabulary_size, max_sequence_length=max_sequence_length, num_segments=num_segments,
        **preset_config(name),
    )
