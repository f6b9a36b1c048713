"""`.keras` files saved while kbert's Transformer blocks were keras-hub's: their blocks' weights renamed."""

import os
import zipfile

from kbert.models.lean_transformer_encoder import KERAS_HUB_BLOCK_ATTRIBUTES

WEIGHTS_MEMBER = "model.weights.h5"


def has_keras_hub_block_layout(path):
    """Whether the `.keras` file at `path` keeps a Transformer block's weights under keras-hub's attribute names.

    Only the names of the weights file's groups are read.
    """
    import h5py

    with zipfile.ZipFile(path) as archive:
        if WEIGHTS_MEMBER not in archive.namelist():
            return False
        with archive.open(WEIGHTS_MEMBER) as member, h5py.File(member, "r") as weights:
            return _groups_to_rename(weights) != []


def upgrade_block_layout(path, folder):
    """A copy of the `.keras` file at `path`, in `folder`, with its blocks' weights where kbert reads them now.

    kbert's Transformer block was keras-hub's `TransformerEncoder` up to
    0.4. Keras names a layer's weights in a `.keras` file by the attribute
    that holds the layer, and keras-hub's block holds its layers under
    private names; kbert's own block holds the same layers under the same
    names, public (`KERAS_HUB_BLOCK_ATTRIBUTES`). The copy renames those
    groups of the weights file; every value and every other member is kept
    as it is.

    Returns:
        The copy's path.
    """
    import h5py

    upgraded = os.path.join(folder, os.path.basename(path))
    with zipfile.ZipFile(path) as archive, zipfile.ZipFile(upgraded, "w") as copy:
        for info in archive.infolist():
            if info.filename != WEIGHTS_MEMBER:
                copy.writestr(info, archive.read(info))
                continue
            weights_path = os.path.join(folder, WEIGHTS_MEMBER)
            with archive.open(info) as member, open(weights_path, "wb") as weights_file:
                while chunk := member.read(1 << 24):
                    weights_file.write(chunk)
            with h5py.File(weights_path, "r+") as weights:
                for group in _groups_to_rename(weights):
                    parent, name = group.rsplit("/", 1)
                    weights[parent].move(name, KERAS_HUB_BLOCK_ATTRIBUTES[name])
            copy.write(weights_path, WEIGHTS_MEMBER, compress_type=info.compress_type)
            os.remove(weights_path)
    return upgraded


def _groups_to_rename(weights):
    groups = []
    weights.visit(lambda name: groups.append(name) if name.rsplit("/", 1)[-1] in KERAS_HUB_BLOCK_ATTRIBUTES else None)
    return groups
