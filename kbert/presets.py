"""Encoder sizes: the BERT paper's base and large, and the smaller models of
Turc et al. (2019), "Well-Read Students Learn Better" (tiny to medium).

L is `num_layers`, H `hidden_dim`, A `num_heads`; the feed-forward size is 4H.
"""

PRESETS = {
    "tiny": {"num_layers": 2, "hidden_dim": 128, "num_heads": 2},
    "mini": {"num_layers": 4, "hidden_dim": 256, "num_heads": 4},
    "small": {"num_layers": 4, "hidden_dim": 512, "num_heads": 8},
    "medium": {"num_layers": 8, "hidden_dim": 512, "num_heads": 8},
    "base": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12},
    "large": {"num_layers": 24, "hidden_dim": 1024, "num_heads": 16},
}
for _preset in PRESETS.values():
    _preset["intermediate_dim"] = 4 * _preset["hidden_dim"]


def preset_config(name):
    """The encoder arguments of a preset, or a clear error for an unknown name."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; the presets are {sorted(PRESETS, key=list(PRESETS).index)}.")
    return dict(PRESETS[name])


def parameter_count(name, vocabulary_size, max_sequence_length=512, num_segments=2):
    """Weights of a preset encoder, counted from its shapes (pooler included)."""
    p = preset_config(name)
    h, i, layers = p["hidden_dim"], p["intermediate_dim"], p["num_layers"]
    embeddings = (vocabulary_size + max_sequence_length + num_segments) * h + 2 * h
    attention = 4 * (h * h + h)
    feed_forward = h * i + i + i * h + h
    layer_norms = 2 * 2 * h
    pooler = h * h + h
    return embeddings + layers * (attention + feed_forward + layer_norms) + pooler
