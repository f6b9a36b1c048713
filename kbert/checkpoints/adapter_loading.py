"""`load_adapter`: a LoRA adapter file on the base encoder it was trained on."""

import io
import json
import os
import zipfile

import keras
import numpy as np

from kbert.checkpoints.encoder_argument import resolve_encoder
from kbert.checkpoints.loading import (
    KNOWN_CHECKPOINTS,
    keras_hub_albert_presets,
    keras_hub_bert_presets,
    known_checkpoint_folder,
)
from kbert.io.safe_loading import allowed_weights, claimed_weight_count
from kbert.models.adapter_file import (
    ADAPTER_FORMAT,
    METADATA,
    base_fingerprint,
    frozen_base_weights,
    trained_weight_indices,
)
from kbert.models.encoder import Encoder
from kbert.saving.model_file import register_kbert_classes

# The encoder settings that shape its weights: an adapter's must be its base's.
SHAPING_SETTINGS = ("vocabulary_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                    "max_sequence_length", "num_segments", "embedding_size", "num_groups",
                    "num_inner_repetitions", "heads_per_layer")
# The most bytes the metadata member of an adapter file may declare (a
# vocabulary of 250,000 tokens and a config fit in far less).
METADATA_LIMIT = 64 * 2 ** 20


def load_adapter(path, base=None):
    """The task model of a LoRA adapter file (`model.save_adapter`), on its base encoder.

    The file holds the task model's config, its adapters, pooler and head;
    the frozen encoder weights come from `base`, which must be the encoder
    the adapters were trained on: its weights' fingerprint (a SHA-256) must
    equal the one the file records, or the load is refused in one line.
    One base serves any number of adapters in a process: each model gets its
    own copy of the base's weights, and `base` itself is left as it is.

    The file is read as data (JSON and NumPy arrays, no pickles) and its
    model config through Keras' safe mode; its encoder must have the base's
    sizes before anything is built.

    Args:
        path: the adapter file.
        base: the base encoder: a `kbert.Encoder` (loaded once, for several
            adapters), or any name or path `kbert.checkpoints.resolve_encoder`
            takes (a checkpoint such as "all-MiniLM-L6-v2", a `.keras`
            file); default the base the file names, where it is a
            checkpoint kbert knows by name (`KNOWN_CHECKPOINTS`, keras-hub's
            BERT and ALBERT presets): a path named in the file is never
            read.

    Returns:
        The task model, compiled as its builder compiles it, LoRA enabled:
        predicting, exporting (adapters merged) and training on work as on
        the model that was saved.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40,
    ...                                verbose=False)
    >>> base = kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab), num_layers=1)
    >>> clf = kbert.classifier(base, num_classes=2, vocabulary=vocab, sequence_length=16, lora_rank=4)
    >>> path = clf.save_adapter(os.path.join(folder, "films.adapter"))
    >>> again = kbert.load_adapter(path, base=base)
    >>> bool(np.allclose(again.predict(["a good film"], verbose=0), clf.predict(["a good film"], verbose=0)))
    True
    """
    path = os.fspath(path)
    metadata = _read_metadata(path)
    base_name = metadata["base"].get("name")
    shown = base if isinstance(base, str) else "the base given"
    if base is None:
        base, shown = _base_named_in(path, base_name), base_name
    if not isinstance(base, Encoder):
        base, _ = resolve_encoder(base, role="base encoder")
    model_config = metadata["model"]
    _check_sizes(path, model_config, base, shown)
    fingerprint = base_fingerprint(base)
    if fingerprint != metadata["base"]["fingerprint"]:
        raise ValueError(
            f"{path} was trained on another base encoder ({base_name or 'unnamed'}, weights "
            f"{metadata['base']['fingerprint'][:12]}...): {shown} has weights {fingerprint[:12]}...; load it "
            "on the encoder it was trained on."
        )
    # No weight of a LoRA model is larger than its base's largest.
    arrays = _read_arrays(path, limit=max(int(np.prod(v.shape)) * 4 for v in base.weights) + 1024)
    _check_claims(path, model_config, base, arrays)
    register_kbert_classes()
    model = keras.saving.deserialize_keras_object(model_config, safe_mode=True)
    for target, source in zip(frozen_base_weights(model.encoder), frozen_base_weights(base), strict=True):
        # A copy: on JAX a variable assigned another's array shares its buffer, which a training step donates.
        target.assign(keras.ops.convert_to_numpy(source))
    expected = trained_weight_indices(model)
    if sorted(arrays) != expected:
        raise ValueError(f"{path} holds weights {sorted(arrays)[:8]}..., not those its model trains "
                         f"({expected[:8]}...): the file is damaged or of another kbert.")
    for index in expected:
        variable, value = model.weights[index], arrays[index]
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{path}: weight {index} ({variable.path}) has shape {value.shape}, the model's "
                             f"is {tuple(variable.shape)}.")
        variable.assign(value)
    model.encoder.base_name = base_name
    return model


def _base_named_in(path, name):
    """Where the base that an adapter file names is, for a checkpoint kbert knows by name; never a path from the file.

    A file is data: the name it holds may be a path (the base's `.keras`
    file where it was trained), which kbert does not read unless the user
    gives it as `base`.
    """
    if not name:
        raise ValueError(f"{path} names no base encoder: give load_adapter(..., base=) the encoder its "
                         "adapters were trained on.")
    if isinstance(name, str) and name.lower() in KNOWN_CHECKPOINTS:
        return known_checkpoint_folder(name)
    if isinstance(name, str) and name in keras_hub_bert_presets() + keras_hub_albert_presets() \
            and not os.path.exists(name):
        return name
    raise ValueError(f"{path} names its base encoder {name!r}, which is not a checkpoint kbert knows by name, and "
                     "kbert reads no path that a file names: give load_adapter(..., base=) that encoder or "
                     "its path.")


def _read_metadata(path):
    """The adapter file's `adapter.json`; one line naming the file where it is not an adapter file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no adapter file there.")
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(METADATA)
            if info.file_size > METADATA_LIMIT:
                raise ValueError(f"its {METADATA} declares {info.file_size} bytes")
            metadata = json.loads(archive.read(METADATA))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as error:
        raise ValueError(f"{path} is not a kbert adapter file ({error}).") from None
    if not isinstance(metadata, dict) or metadata.get("format") != ADAPTER_FORMAT:
        found = metadata.get("format") if isinstance(metadata, dict) else None
        raise ValueError(f"{path} is not a kbert adapter file of format {ADAPTER_FORMAT} (format {found!r}).")
    if not isinstance(metadata.get("base"), dict) or not isinstance(metadata.get("model"), dict):
        raise ValueError(f"{path} is not a kbert adapter file (no model or base in its {METADATA}).")
    return metadata


def _read_arrays(path, limit):
    """`{index: array}` of the adapter file's weights, none over `limit` bytes, read without pickles."""
    arrays = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename
                if not (name.startswith("weights/") and name.endswith(".npy")):
                    continue
                if info.file_size > limit:
                    raise ValueError(f"{name} declares {info.file_size} bytes, more than any weight of its base")
                index = int(name[len("weights/"):-len(".npy")])
                arrays[index] = np.load(io.BytesIO(archive.read(name)), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise ValueError(f"{path} is not a kbert adapter file ({error}).") from None
    return arrays


def _check_sizes(path, model_config, base, shown):
    """A ValueError where the adapter's encoder is not of the base's sizes (checked before anything is built)."""
    try:
        encoder_config = model_config["config"]["encoder"]["config"]
    except (KeyError, TypeError):
        raise ValueError(f"{path} is not a kbert adapter file (its model has no encoder).") from None
    base_config = base.get_config()
    lora = encoder_config.get("lora")
    rank = lora.get("rank") if isinstance(lora, dict) else None
    if not isinstance(rank, int) or not 0 < rank <= base_config["hidden_dim"]:
        raise ValueError(f"{path} is not a kbert adapter file (its encoder has no LoRA rank from 1 to the "
                         f"base's width {base_config['hidden_dim']}: {rank!r}).")
    differ = [name for name in SHAPING_SETTINGS if encoder_config.get(name) != base_config.get(name)]
    if differ:
        name = differ[0]
        raise ValueError(f"{path} was trained on an encoder of another shape: its {name} is "
                         f"{encoder_config.get(name)!r}, {shown}'s is {base_config.get(name)!r}.")


def _check_claims(path, model_config, base, arrays):
    """Refuses a config whose heads imply more weights than the base and the file's arrays hold, before building."""
    try:
        claimed = claimed_weight_count(model_config)
    except ValueError as error:
        raise ValueError(f"{path}: its config says {error}; refused before building it.") from None
    held = base.count_params() + sum(int(array.size) for array in arrays.values())
    if claimed > allowed_weights(held):
        raise ValueError(f"{path}: its config implies a model of at least {claimed:,} weights, but the base and "
                         f"the file hold {held:,}; refused before building it.")
