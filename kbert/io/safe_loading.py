"""Checks a `.keras` file before Keras reads it: its sizes are bounded by what the file holds, not by what it claims.

`check_keras_file` checks, before Keras reads a byte:

- the file is a whole zip archive whose members declare sane sizes
  (`LIMITS`: a few MB of compressed whitespace can declare a config.json of
  gigabytes);
- `config.json` and `metadata.json` nest no deeper than kbert parses
  (`kbert.io.text_files.MAX_JSON_DEPTH`) and parse;
- the weights that the config implies (each encoder's embedding tables and
  Transformer blocks, each task head) are no more than `model.weights.h5`
  holds, by the shapes its datasets declare (read without their data), and
  those shapes are no bigger than the bytes the member holds: a config
  that claims `vocabulary_size: 20000000` or `num_layers: 100000` beside
  weights of a tiny model is refused before Keras builds (and allocates)
  the model it describes.

A path is read locally when a file is there, even with `://` in it (Keras
would take it for a URL and read it unchecked); otherwise a `scheme://`
path is opened with TensorFlow's file systems (`gs://`, ...) and checked
the same way.

`encoder_weight_count` is the arithmetic of those checks, shared with
`kbert.checkpoints` (which checks Hugging Face, Google and keras-hub
checkpoints the same way before building an encoder).
"""

import json
import os
import re
import zipfile

from kbert.io.text_files import MAX_JSON_DEPTH, json_too_deep
from kbert.io.weights_file_sizes import weights_held

_MB = 1 << 20
# The most each member of a `.keras` may hold, uncompressed. Keras reads
# `config.json` and `metadata.json` whole into memory (and parses them),
# extracts `assets/` to disk, and reads the weights from the archive.
# A kbert config holds the vocabulary: BERT's 30,522 WordPieces make a
# 333 KB config.json, a 250,000-piece SentencePiece model (base64) about
# 7 MB. BERT-large's weights with an Adam optimizer's are about 4 GB.
LIMITS = {
    "config.json": 64 * _MB,
    "metadata.json": 1 * _MB,
    "assets/": 256 * _MB,  # each file under assets/
    "model.weights.h5": 32 * 1024 * _MB,
    "model.weights.npz": 32 * 1024 * _MB,
    "": 64 * _MB,  # any other member
}
_WHAT = {"assets/": "an asset", "": "a member Keras does not write"}

# The most Transformer layers kbert builds from a file. With shared layers
# (ALBERT's groups) the count is no tensor's: a config of 100,000 layers
# over one shared block would take minutes to build. The deepest published
# encoders have 48.
MAX_LAYERS = 1024


def allowed_weights(held):
    """The most weights a config may imply beside a file that holds `held`: a small margin for rounding."""
    return held + held // 100 + (1 << 16)


def encoder_weight_count(vocabulary_size, num_layers, hidden_dim, intermediate_dim, max_sequence_length=512,
                         num_segments=2, embedding_size=None, num_groups=None, num_inner_repetitions=1,
                         num_heads=None, heads_per_layer=None, shared=None):
    """A lower bound on the weights of an encoder of these sizes (kbert's, BERT's, ALBERT's, keras-hub's).

    It takes each size the `kbert.Encoder` takes (more than ten), so that
    an encoder's config, or a checkpoint's mapped onto one, spreads into it.

    Counted are the embedding tables, the embedding projection (when the
    embedding size is not the hidden size) and each distinct Transformer
    block's matrices; biases, norms and the pooler are left out, so that a
    real checkpoint always holds at least this many. With shared layers
    (`num_groups` other than `num_layers`, `num_inner_repetitions` over 1,
    or `shared` True) a block is counted once however often it is applied.

    Example:
    >>> encoder_weight_count(30522, 12, 768, 3072)  # BERT-base: 109 M weights in all
    108770304
    """
    hidden = hidden_dim
    embedding = embedding_size or hidden
    count = (vocabulary_size + max_sequence_length + num_segments) * embedding
    if embedding != hidden:
        count += embedding * hidden
    if shared is None:
        shared = num_groups is not None and (num_groups != num_layers or num_inner_repetitions != 1)
    feedforward = 2 * hidden * intermediate_dim
    if shared:
        return count + (num_groups or 1) * num_inner_repetitions * (4 * hidden * hidden + feedforward)
    if heads_per_layer is not None and num_heads:
        head_dim = hidden // num_heads
        return count + sum(4 * hidden * heads * head_dim + feedforward for heads in heads_per_layer)
    return count + num_layers * (4 * hidden * hidden + feedforward)


def claimed_key(count, sizes, keys):
    """The key of `sizes` that `count(sizes)` rests on most: the one that, were it 1, leaves the fewest weights."""
    def without(key):
        return count({**sizes, key: 1})

    return min(keys, key=without)


def check_keras_file(path, limits=None):
    """Raises unless `path` is a whole `.keras` archive whose sizes are bounded by what it holds.

    Sizes are the uncompressed sizes the archive declares, checked before
    anything is read: a few MB of compressed whitespace can declare a
    config.json of gigabytes, which Keras would read into memory. Python's
    zipfile reads no more than a member declares, so the declared size
    bounds what is read. Then `config.json` is parsed (refused if it nests
    deeper than `MAX_JSON_DEPTH`), and the weights it implies are compared
    with those `model.weights.h5` holds (see the module's docstring).

    Args:
        path: the `.keras` file: a local path (read locally whenever a file
            is there, `://` in its name or not) or a URL of a file system
            TensorFlow reads (`gs://...`).
        limits: `{member name: most bytes}`, as `LIMITS` (its default);
            "assets/" is for each file under assets/, "" for any other
            member.

    Returns:
        The path for Keras to read: a local path with `://` in it made
        absolute and normalised, so that Keras does not take it for a URL.

    Raises:
        FileNotFoundError, IsADirectoryError: no file at `path`.
        ValueError: not a whole zip archive, a member missing or over its
            limit, a config that does not parse or nests too deep, or one
            that implies more weights than the file holds; one line naming
            the file (and the member, the config key and both sizes).
    """
    limits = {**LIMITS, **(limits or {})}
    path = os.fspath(path)
    local = os.path.exists(path)
    if local and os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; give the model's .keras file.")
    with _open(path, local) as file:
        if not zipfile.is_zipfile(file):
            raise ValueError(f"{path} is not a valid .keras file (not a whole zip archive: truncated or corrupt).")
        with zipfile.ZipFile(file) as archive:
            _check_members(path, archive, limits)
            config = _read_json_member(path, archive, "config.json")
            _read_json_member(path, archive, "metadata.json")
            check_config_claims(path, config, archive)
    if local and "://" in path:
        return os.path.abspath(path)  # "a://b/m.keras" -> "/cwd/a:/b/m.keras", which Keras reads as a file
    return path


def _open(path, local):
    if local:
        return open(path, "rb")
    if "://" not in path:
        raise FileNotFoundError(f"No model file at {path}.")
    import tensorflow as tf

    try:
        found = tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
    except tf.errors.OpError as error:  # e.g. a scheme no file system of TensorFlow's reads
        reason = (str(getattr(error, "message", error)).strip().splitlines() or [type(error).__name__])[0]
        raise FileNotFoundError(f"No model file at {path} ({reason}).") from None
    if not found:
        raise FileNotFoundError(f"No model file at {path}.")
    return tf.io.gfile.GFile(path, "rb")


def _check_members(path, archive, limits):
    members = archive.infolist()
    names = {member.filename for member in members}
    missing = sorted({"config.json", "metadata.json"} - names)
    if missing:
        raise ValueError(f"{path} is not a valid .keras file (it lacks {', '.join(missing)}).")
    for member in members:
        kind = _kind(member.filename, limits)
        if member.file_size > limits[kind]:
            raise ValueError(
                f"{path}: its member {member.filename} is {member.file_size:,} bytes uncompressed, over the "
                f"{limits[kind]:,} bytes kbert reads for {_WHAT.get(kind, kind)}; refused before reading it."
            )


def _kind(name, limits):
    if name in limits and name not in ("assets/", ""):
        return name
    return "assets/" if name.startswith("assets/") else ""


def _read_json_member(path, archive, name):
    """A JSON member, checked for nesting before it is parsed; one line naming the file and member otherwise."""
    try:
        data = archive.read(name)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise ValueError(f"{path} is not a valid .keras file (its {name} cannot be read: {error}).") from None
    line = json_too_deep(data)
    if line is not None:
        raise ValueError(f"{path}: its {name} nests deeper than {MAX_JSON_DEPTH} levels (line {line}); "
                         "refused before parsing it.")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ValueError(f"{path}: its {name} is not valid JSON: {reason}.") from None


_UNKNOWN = re.compile(r"Could not (?:locate|deserialize) (class|function) '([^']{0,200})'")


def keras_loading_refusal(path, error):
    """Keras' error for a class it does not know, as one short line naming the file and the class, or None.

    Keras says "Could not locate class 'Foo'" followed by the whole config
    (hundreds of KB for a model with its vocabulary), wrapped once per level
    of nesting; only the class is said here.
    """
    for _ in range(100):  # down the chain of wrapped errors
        if error is None:
            return None
        match = _UNKNOWN.search(str(error)[:1000])
        if match:
            kind, name = match.groups()
            shown = name if len(name) <= 80 else name[:77] + "..."
            return ValueError(f"{path}: unknown {kind} {shown!r} in its config.json: neither kbert's nor "
                              "Keras'; kbert loads the models it saves.")
        error = error.__cause__ or error.__context__
    return None


# What a `.keras` config implies.
def check_config_claims(path, config, archive):
    """Refuses a config whose encoders and heads imply more weights than the archive's weights member holds."""
    claims = list(_claims(config))
    if not claims:
        return
    try:
        needed = claimed_weight_count(config)
    except ValueError as error:
        raise ValueError(f"{path}: config.json says {error}; refused before building it.") from None
    name, held = weights_held(path, archive)
    if needed <= allowed_weights(held):
        return
    where, sizes, count = max(claims, key=lambda claim: claim[2](claim[1]))
    key = claimed_key(count, sizes, claim_keys(sizes))
    value = sizes[key]
    said = f"{value:,} {key}" if key in _HEAD_LISTS else f"{key} {value}"
    holds = f"{name} holds {held:,}" if name else "it holds no weights file"
    raise ValueError(
        f"{path}: config.json says {said} for {where}, a model of at least {needed:,} weights, but {holds}; "
        "refused before building it."
    )


_ENCODER_KEYS = ("vocabulary_size", "num_layers", "hidden_dim", "intermediate_dim", "max_sequence_length",
                 "num_segments", "embedding_size", "num_groups", "num_inner_repetitions", "num_heads")
_ENCODERS = {
    # class: (embedding key, whether its layers are always groups)
    "Encoder": ("embedding_size", False),  # kbert's
    "BertBackbone": (None, False),  # keras-hub's (and keras-nlp's)
    "AlbertBackbone": ("embedding_dim", True),
}
# Task settings that size a head (one row of hidden_dim weights each): an int, or a list's length.
_HEAD_COUNTS = ("num_classes",)
_HEAD_LISTS = ("class_names", "labels")


def _encoder_kind(node):
    """`_ENCODERS[class]` of a serialized encoder or backbone, else None.

    The class is the one Keras would look up (its registered name, which
    defaults to the class name, as in `keras.saving.deserialize_keras_object`),
    or the class name (which keras-hub objects are found by, with their
    module): either names an encoder here, so that no renaming escapes the
    check.
    """
    if not isinstance(node, dict) or not isinstance(node.get("config"), dict):
        return None
    class_name = node.get("class_name")
    registered = node.get("registered_name", class_name)
    for name in (registered, class_name):
        if isinstance(name, str) and name.rsplit(">", 1)[-1] in _ENCODERS:
            return _ENCODERS[name.rsplit(">", 1)[-1]]
    return None


def _size(value):
    """A config value as a positive int, or None (the class's own check refuses it)."""
    if isinstance(value, float) and value.is_integer() and value >= 1:
        value = int(value)  # the classes take 2.0 (and 1e300) as sizes too
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def encoder_claim(node):
    """`(sizes, count)` of a serialized kbert encoder or keras-hub backbone, else None.

    `sizes` are its config's sizes under the config's own keys; `count(sizes)`
    is the fewest weights an encoder of such sizes has. None too for sizes
    that are not positive integers: the class's own check refuses them.
    """
    kind = _encoder_kind(node)
    if kind is None:
        return None
    embedding_key, grouped = kind
    config = node["config"]
    defaults = {"max_sequence_length": 512, "num_segments": 2, "num_inner_repetitions": 1}
    sizes = {}
    for key in _ENCODER_KEYS:
        source = embedding_key if key == "embedding_size" else key
        if source is None or config.get(source) is None:
            if key in defaults:
                sizes[key] = defaults[key]
            continue
        sizes[source] = _size(config[source])
        if sizes[source] is None:
            return None
    if not {"vocabulary_size", "num_layers", "hidden_dim", "intermediate_dim"} <= set(sizes):
        return None
    if sizes.get("num_groups") == sizes["num_layers"] and not grouped:
        del sizes["num_groups"]  # one block per layer: the layer count is the one that sizes the model
    heads = config.get("heads_per_layer")
    if isinstance(heads, list) and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in heads):
        sizes["heads_per_layer"] = heads

    def count(sizes):
        return encoder_weight_count(
            sizes["vocabulary_size"], sizes["num_layers"], sizes["hidden_dim"], sizes["intermediate_dim"],
            sizes["max_sequence_length"], sizes["num_segments"], sizes.get(embedding_key or "embedding_size"),
            sizes.get("num_groups", 1 if grouped else None), sizes["num_inner_repetitions"], sizes.get("num_heads"),
            sizes.get("heads_per_layer"), shared=True if grouped else None,
        )

    return sizes, count


def claimed_weight_count(config):
    """The weights a model config's encoders and task heads imply (at least), checked first for too many layers."""
    claims = list(_claims(config))
    for where, sizes, _ in claims:
        applications = sizes.get("num_layers", 1) * sizes.get("num_inner_repetitions", 1)
        if "num_layers" in sizes and applications > MAX_LAYERS:
            raise ValueError(f"num_layers {sizes['num_layers']} for {where}: {applications:,} Transformer layers, "
                             f"over the {MAX_LAYERS:,} kbert builds from a file")
    return sum(count(sizes) for _, sizes, count in claims)


def claim_keys(sizes):
    """The keys of an encoder's sizes that a claim may rest on (not the heads, which size nothing alone)."""
    return [key for key in sizes if key not in ("num_heads", "heads_per_layer")]


def _claims(node):
    """`(where, sizes, count)` of each encoder and task head a config tree holds."""
    if isinstance(node, list):
        for value in node:
            yield from _claims(value)
        return
    if not isinstance(node, dict):
        return
    encoder = encoder_claim(node)
    if encoder is not None:
        name = node["config"].get("name")
        yield (f"the encoder {name!r}" if isinstance(name, str) else "an encoder"), *encoder
        return
    config = node.get("config")
    if isinstance(config, dict):
        inner = encoder_claim(config.get("encoder"))
        head = _head_size(config)
        if inner is not None and head is not None:
            key, value = head
            hidden = inner[0]["hidden_dim"]
            name = node.get("class_name")
            where = f"the {name} head" if isinstance(name, str) else "a task head"
            yield where, {key: value}, lambda sizes, key=key: _head_rows(sizes[key]) * hidden
    for value in node.values():
        yield from _claims(value)


def _head_size(config):
    """The largest class or label count of a task model's config (or its preprocessor's): `(key, value)`."""
    found = []
    configs = [config]
    preprocessor = config.get("preprocessor")
    if isinstance(preprocessor, dict) and isinstance(preprocessor.get("config"), dict):
        configs.append(preprocessor["config"])
    for settings in configs:
        for key in _HEAD_COUNTS:
            value = _size(settings.get(key))
            if value is not None:
                found.append((key, value))
        for key in _HEAD_LISTS:
            value = settings.get(key)
            if isinstance(value, list) and value:
                found.append((key, value))
    return max(found, key=lambda item: _head_rows(item[1]), default=None)


def _head_rows(value):
    return len(value) if isinstance(value, list) else value
