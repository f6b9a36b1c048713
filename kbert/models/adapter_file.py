"""LoRA adapter files: what a LoRA-tuned task model learned, apart from the frozen encoder it learned it on.

An adapter file is a zip archive: the member `adapter.json` holds the task
model's config (its encoder's config, LoRA settings and preprocessor,
vocabulary included) and the base encoder's name and fingerprint; each
trained variable is a NumPy `.npy` member of its own (read without
pickles), `weights/<i>.npy`, named by its position among the model's
weights. The frozen encoder is not in it:
`kbert.load_adapter` takes it from the base, and refuses a base whose
fingerprint differs.
"""

import hashlib
import io
import json
import zipfile

import keras
import numpy as np

from kbert.io.atomic_files import write_atomically

ADAPTER_FORMAT = 1
METADATA = "adapter.json"


def is_adapter_file(path):
    """Whether `path` is a zip archive holding an adapter file's metadata (its contents are not read)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return METADATA in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def frozen_base_weights(encoder):
    """The encoder's variables a LoRA model takes from its base: all but the adapters and the pooler, in order.

    The pooler trains with the task's head (`Encoder.enable_lora`), so an
    adapter file holds its own.
    """
    left_out = {id(variable) for variable in encoder.lora_adapters}
    left_out |= {id(variable) for variable in encoder.pooler_dense.weights}
    return [variable for variable in encoder.weights if id(variable) not in left_out]


def base_fingerprint(encoder):
    """A SHA-256 of `frozen_base_weights(encoder)`: their shapes and float32 values, in order."""
    digest = hashlib.sha256()
    for variable in frozen_base_weights(encoder):
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(variable), dtype="<f4")
        digest.update(repr(value.shape).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def trained_weight_indices(model):
    """Positions in `model.weights` of what LoRA fine-tuning trains: adapters, pooler, head (and no frozen weight)."""
    frozen = {id(variable) for variable in frozen_base_weights(model.encoder)}
    return [index for index, variable in enumerate(model.weights) if id(variable) not in frozen]


def write_adapter(model, path, base_name=None):
    """Writes `model`'s adapter file to `path` (atomically); see the module. Returns the path."""
    if model.encoder.lora is None:
        raise ValueError(f"This {type(model).__name__} has no LoRA adapters to save: enable_lora(rank) first, "
                         "or save the whole model with model.save(path).")
    metadata = {
        "format": ADAPTER_FORMAT,
        "model": keras.saving.serialize_keras_object(model),
        "base": {"name": base_name, "fingerprint": base_fingerprint(model.encoder)},
    }
    members = {METADATA: json.dumps(metadata).encode()}
    for index in trained_weight_indices(model):
        buffer = io.BytesIO()
        np.save(buffer, keras.ops.convert_to_numpy(model.weights[index]), allow_pickle=False)
        members[f"weights/{index}.npy"] = buffer.getvalue()

    def write(temporary):
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)

    write_atomically(path, write)
    return path
