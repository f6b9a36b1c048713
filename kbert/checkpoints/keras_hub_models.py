"""kbert's encoder and tokenizer to and from keras-hub's (and keras-nlp's) `BertBackbone` and `BertTokenizer`.

Both encoders build the same variables under the same paths, except the
pooler (`pooler_dense` here, `pooled_dense` in keras-hub), so weights are
matched by path and shape, never by position. keras-nlp 0.32 is an alias of
keras-hub 0.32: its classes are the same objects.

The two compute one thing differently: keras-hub's `BertBackbone` uses GELU's
tanh approximation, kbert the exact GELU of BERT's reference code. With the
same weights their outputs differ by about 1e-5 to 1e-4.
"""

import numpy as np

_RENAMED = {"pooler_dense/": "pooled_dense/"}  # kbert path prefix -> keras-hub's


def _keras_hub_path(path):
    for ours, theirs in _RENAMED.items():
        if path.startswith(ours):
            return theirs + path[len(ours):]
    return path


def _relative_paths(model):
    # Paths start with the model's own name when it is nested in another model.
    prefix = model.name + "/"
    return [v.path[len(prefix):] if v.path.startswith(prefix) else v.path for v in model.weights]


def _copy_weights(source, target, target_path_of_source, what):
    """Assigns `source`'s weights to `target`'s variables matched by path; every one must match."""
    source_values = dict(zip(_relative_paths(source), source.weights))
    problems, assignments = [], []
    matched = set()
    for path, variable in zip(_relative_paths(target), target.weights):
        source_path = target_path_of_source(path)
        value = source_values.get(source_path)
        if value is None:
            problems.append(f"no weight {source_path} for {path} {tuple(variable.shape)}")
            continue
        matched.add(source_path)
        if tuple(value.shape) != tuple(variable.shape):
            problems.append(f"{source_path} has shape {tuple(value.shape)}; {path} has {tuple(variable.shape)}")
            continue
        assignments.append((variable, value))
    problems += [f"unused weight {path}" for path in source_values if path not in matched]
    if problems:
        raise ValueError(f"{what}:\n  " + "\n  ".join(problems))
    for variable, value in assignments:
        variable.assign(np.asarray(value.numpy()).astype(variable.dtype))


def encoder_from_keras_hub(backbone, dropout=None, dtype=None):
    """A `kbert.Encoder` with the weights of a keras-hub (or keras-nlp) `BertBackbone`.

    Args:
        backbone: a `keras_hub.models.BertBackbone`, e.g. from
            `BertBackbone.from_preset("bert_base_en_uncased")`.
        dropout: the encoder's dropout rate; default the backbone's.
        dtype: the encoder's dtype policy; default the backbone's layers'.

    Returns:
        A `kbert.Encoder` of the same shape and weights, computing exact GELU.
    """
    import keras_hub

    from kbert.models.encoder import Encoder

    if not isinstance(backbone, keras_hub.models.BertBackbone):
        raise TypeError(f"Expected a keras_hub.models.BertBackbone, got {type(backbone).__name__}.")
    encoder = Encoder(
        vocabulary_size=backbone.vocabulary_size,
        num_layers=backbone.num_layers,
        hidden_dim=backbone.hidden_dim,
        num_heads=backbone.num_heads,
        intermediate_dim=backbone.intermediate_dim,
        dropout=backbone.dropout if dropout is None else dropout,
        max_sequence_length=backbone.max_sequence_length,
        num_segments=backbone.num_segments,
        dtype=backbone.token_embedding.dtype_policy if dtype is None else dtype,
    )
    _copy_weights(backbone, encoder, _keras_hub_path,
                  f"The BertBackbone {backbone.name!r} does not fit a kbert encoder")
    return encoder


def encoder_to_keras_hub(encoder):
    """A keras-hub `BertBackbone` with a `kbert.Encoder`'s shape, dropout, dtype and weights.

    keras-hub's backbone computes GELU's tanh approximation, so its outputs
    differ from the encoder's by about 1e-5 to 1e-4.
    """
    import keras_hub

    from kbert.models.encoder import Encoder

    if not isinstance(encoder, Encoder):
        raise TypeError(f"Expected a kbert.Encoder, got {type(encoder).__name__}.")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=encoder.vocabulary_size,
        num_layers=encoder.num_layers,
        num_heads=encoder.num_heads,
        hidden_dim=encoder.hidden_dim,
        intermediate_dim=encoder.intermediate_dim,
        dropout=encoder.dropout,
        max_sequence_length=encoder.max_sequence_length,
        num_segments=encoder.num_segments,
        dtype=encoder.layer_dtype_policy,
    )
    ours = {_keras_hub_path(path): path for path in _relative_paths(encoder)}
    _copy_weights(encoder, backbone, lambda path: ours.get(path, path),
                  f"The encoder {encoder.name!r} does not fit a BertBackbone")
    return backbone


def tokenizer_from_keras_hub(tokenizer):
    """A `kbert.Tokenizer` with a keras-hub `BertTokenizer`'s vocabulary and casing.

    Accents are stripped when the text is lowercased, as in BERT's uncased
    models, whatever the keras-hub tokenizer's own `strip_accents`.
    """
    from kbert.preprocessing.tokenizer import Tokenizer

    return Tokenizer(tokenizer.get_vocabulary(), lowercase=tokenizer.lowercase)


def tokenizer_to_keras_hub(tokenizer):
    """A keras-hub `BertTokenizer` that splits text as a `kbert.Tokenizer` does (same vocabulary and casing)."""
    import keras_hub

    return keras_hub.tokenizers.BertTokenizer(
        vocabulary=tokenizer.get_vocabulary(),
        lowercase=tokenizer.lowercase,
        strip_accents=tokenizer.strip_accents,
    )
