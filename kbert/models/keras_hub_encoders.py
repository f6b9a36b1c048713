"""kbert's encoder to and from keras-hub's (and keras-nlp's) BERT and ALBERT backbones.

`BertBackbone` for BERT, `AlbertBackbone` for ALBERT. The encoders build
the same variables under the same paths, except the pooler (`pooler_dense`
here, `pooled_dense` in keras-hub) and ALBERT's shared blocks
(`transformer_group_{g}_layer_{k}`, or `transformer_layer_{g}` without
sharing, here; `group_{g}_inner_layer_{k}` in keras-hub), so weights are
matched by path and shape, never by position. keras-nlp 0.32 is an alias of
keras-hub 0.32: its classes are the same objects.

The two compute one thing differently: keras-hub's `BertBackbone` uses GELU's
tanh approximation, kbert the exact GELU of BERT's reference code. With the
same weights their outputs differ by about 1e-5 to 1e-4.

`kbert.Encoder.from_keras_hub` and `to_keras_hub`, and
`kbert.checkpoints.encoder_from_keras_hub` and `encoder_to_keras_hub`, call
these; the tokenizers' conversions are in `kbert.checkpoints.keras_hub_models`.
The encoder's methods are why this module stays beside it: `kbert.models`
imports nothing of `kbert.checkpoints`, which imports it.
"""

import re

import numpy as np

_RENAMED = {"pooler_dense/": "pooled_dense/"}  # kbert path prefix -> keras-hub's


def _keras_hub_path(path):
    for ours, theirs in _RENAMED.items():
        if path.startswith(ours):
            return theirs + path[len(ours):]
    return path


def _albert_keras_hub_path(path):
    """The `AlbertBackbone` path of a kbert encoder variable path."""
    match = re.match(r"transformer_(?:layer_(\d+)|group_(\d+)_layer_(\d+))/", path)
    if match:
        layer, group, inner = match.groups()
        group, inner = (layer, 0) if layer is not None else (group, inner)
        return f"group_{group}_inner_layer_{inner}/" + path[match.end():]
    return _keras_hub_path(path)


_PROJECTION = ("embedding_projection/kernel", "embedding_projection/bias")
# The shape arguments that kbert's encoders and keras-hub's backbones name alike.
_SHARED_SHAPE = ("vocabulary_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                 "max_sequence_length", "num_segments")


def _relative_paths(model):
    # Paths start with the model's own name when it is nested in another model.
    prefix = model.name + "/"
    return [v.path[len(prefix):] if v.path.startswith(prefix) else v.path for v in model.weights]


def _copy_weights(source, target, target_path_of_source, what, unused=()):
    """Assigns `source`'s weights to `target`'s variables matched by path; every one must match.

    Source paths in `unused` may be left unmatched; target paths that
    `target_path_of_source` maps to None are left as they are.
    """
    source_values = dict(zip(_relative_paths(source), source.weights))
    problems, assignments = [], []
    matched = set()
    for path, variable in zip(_relative_paths(target), target.weights):
        source_path = target_path_of_source(path)
        if source_path is None:
            continue
        value = source_values.get(source_path)
        if value is None:
            problems.append(f"no weight {source_path} for {path} {tuple(variable.shape)}")
            continue
        matched.add(source_path)
        if tuple(value.shape) != tuple(variable.shape):
            problems.append(f"{source_path} has shape {tuple(value.shape)}; {path} has {tuple(variable.shape)}")
            continue
        assignments.append((variable, value))
    problems += [
        f"unused weight {path}" for path in source_values if path not in matched and path not in unused
    ]
    if problems:
        raise ValueError(f"{what}:\n  " + "\n  ".join(problems))
    for variable, value in assignments:
        variable.assign(np.asarray(value.numpy()).astype(variable.dtype))


def encoder_from_backbone(encoder_class, backbone, dropout=None, dtype=None, attention_dropout=None):
    """An `encoder_class` (`kbert.Encoder`) with the weights of a keras-hub (or keras-nlp) `BertBackbone` or `AlbertBackbone`.

    Args:
        encoder_class: the class to build, `kbert.Encoder` (given by its
            `from_keras_hub`, so that this module needs no import of it).
        backbone: a `keras_hub.models.BertBackbone`, e.g. from
            `BertBackbone.from_preset("bert_base_en_uncased")`, or an
            `AlbertBackbone` (`"albert_base_en_uncased"`).
        dropout: the encoder's dropout rate; default the backbone's (its
            one rate, which keras-hub also applies to attention).
        attention_dropout: the encoder's dropout rate of attention
            probabilities; default the encoder's `dropout`.
        dtype: the encoder's dtype policy; default the backbone's layers'.

    Returns:
        A `kbert.Encoder` of the same shape and weights: computing exact
        GELU for a BERT, GELU's tanh form (as `AlbertBackbone`) for an ALBERT.
    """
    import keras_hub

    is_albert = isinstance(backbone, keras_hub.models.AlbertBackbone)
    if not (is_albert or isinstance(backbone, keras_hub.models.BertBackbone)):
        raise TypeError(
            "Expected a keras_hub.models.BertBackbone or AlbertBackbone, got "
            f"{type(backbone).__name__}."
        )
    arguments = dict(
        {name: getattr(backbone, name) for name in _SHARED_SHAPE},
        dropout=backbone.dropout if dropout is None else dropout,
        attention_dropout=attention_dropout,
        dtype=backbone.token_embedding.dtype_policy if dtype is None else dtype,
    )
    unused = ()
    if is_albert:
        arguments.update(
            embedding_size=backbone.embedding_dim,
            num_groups=backbone.num_groups,
            num_inner_repetitions=backbone.num_inner_repetitions,
            activation="gelu_approximate",
        )
        if backbone.embedding_dim == backbone.hidden_dim:
            _check_identity_projection(backbone)
            unused = _PROJECTION
    encoder = encoder_class(**arguments)
    name = type(backbone).__name__
    _copy_weights(backbone, encoder, _albert_keras_hub_path if is_albert else _keras_hub_path,
                  f"The {name} {backbone.name!r} does not fit a kbert encoder", unused=unused)
    return encoder


def _check_identity_projection(backbone):
    # kbert's encoder has no projection when E = H: the backbone's must do nothing.
    kernel, bias = (np.asarray(w.numpy()) for w in backbone.embeddings_projection.weights)
    if not (np.allclose(kernel, np.eye(len(kernel)), atol=1e-6) and np.allclose(bias, 0, atol=1e-6)):
        raise ValueError(
            f"The AlbertBackbone {backbone.name!r} has embedding_dim = hidden_dim "
            f"({backbone.hidden_dim}) and a projection that is no identity; kbert's encoder has no "
            "projection when E = H."
        )


def backbone_from_encoder(encoder):
    """A keras-hub `BertBackbone` (or `AlbertBackbone`) with a `kbert.Encoder`'s shape, dropout, dtype and weights.

    An encoder with factorized embeddings, shared layers or GELU's tanh form
    becomes an `AlbertBackbone` (with E = H, its projection is set to the
    identity); any other a `BertBackbone`. keras-hub's backbones compute
    GELU's tanh approximation, so the outputs of an exact-GELU encoder
    differ from them by about 1e-5 to 1e-4.
    """
    import keras_hub

    if encoder.lora is not None:
        raise ValueError(f"The encoder {encoder.name!r} has LoRA adapters: convert `model.merge_lora()`'s "
                         "encoder, whose kernels hold them.")
    if encoder.is_head_pruned:
        raise ValueError(
            f"The encoder {encoder.name!r} has pruned attention heads (heads_per_layer="
            f"{encoder.heads_per_layer}); keras-hub's backbones have `num_heads` heads in every layer."
        )
    common = dict(
        {name: getattr(encoder, name) for name in _SHARED_SHAPE},
        dropout=encoder.dropout,
        dtype=encoder.layer_dtype_policy,
    )
    if not is_albert_encoder(encoder):
        backbone = keras_hub.models.BertBackbone(**common)
        ours = {_keras_hub_path(path): path for path in _relative_paths(encoder)}
        _copy_weights(encoder, backbone, lambda path: ours.get(path, path),
                      f"The encoder {encoder.name!r} does not fit a BertBackbone")
        return backbone
    backbone = keras_hub.models.AlbertBackbone(
        **common,
        embedding_dim=encoder.embedding_size,
        num_groups=encoder.num_groups,
        num_inner_repetitions=encoder.num_inner_repetitions,
    )
    ours = {_albert_keras_hub_path(path): path for path in _relative_paths(encoder)}
    if encoder.embedding_size == encoder.hidden_dim:
        kernel, bias = backbone.embeddings_projection.weights
        kernel.assign(np.eye(encoder.hidden_dim, dtype=kernel.dtype))
        bias.assign(np.zeros(encoder.hidden_dim, dtype=bias.dtype))
        ours.update({path: None for path in _PROJECTION})  # they keep the identity
    _copy_weights(encoder, backbone, lambda path: ours.get(path, path),
                  f"The encoder {encoder.name!r} does not fit an AlbertBackbone")
    return backbone


def is_albert_encoder(encoder):
    """Whether an encoder needs ALBERT's format: factorized embeddings, shared layers or GELU's tanh form."""
    shared = encoder.num_groups != encoder.num_layers or encoder.num_inner_repetitions != 1
    return encoder.embedding_size != encoder.hidden_dim or shared or encoder.activation != "gelu"
