"""`.keras` files of earlier kbert versions, whose blocks' weights lie under other names: renamed.

kbert 0.4's blocks were `LeanTransformerEncoder`s, a subclass of keras-hub's
`TransformerEncoder`; kbert's own block is `TransformerBlock`.
"""

import os
import re
import zipfile

from kbert.models.transformer_block import KERAS_HUB_BLOCK_ATTRIBUTES

WEIGHTS_MEMBER = "model.weights.h5"
# Keras names the group of a layer held in a list (an encoder's blocks) by its
# class; the blocks of kbert 0.4 were `LeanTransformerEncoder`s.
_OLD_BLOCK_GROUP = re.compile(r"lean_transformer_encoder(_[0-9]+)?")


def has_old_block_layout(path):
    """Whether the `.keras` file at `path` keeps a Transformer block's weights under an earlier kbert's names.

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
    names, public (`KERAS_HUB_BLOCK_ATTRIBUTES`). The block class was
    `LeanTransformerEncoder`, which named each block's group (Keras names
    the layers of a list by their class). The copy renames those
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
                    weights[parent].move(name, _new_name(name))
            copy.write(weights_path, WEIGHTS_MEMBER, compress_type=info.compress_type)
            os.remove(weights_path)
    return upgraded


def _new_name(name):
    """The name a group of an earlier kbert's weights file has now, or None where it is the same."""
    if name in KERAS_HUB_BLOCK_ATTRIBUTES:
        return KERAS_HUB_BLOCK_ATTRIBUTES[name]
    old_block = _OLD_BLOCK_GROUP.fullmatch(name)
    return None if old_block is None else "transformer_block" + (old_block.group(1) or "")


def _groups_to_rename(weights):
    """The paths of the groups to rename, the deepest first: renaming a group moves the paths below it."""
    groups = []
    weights.visit(lambda path: groups.append(path) if _new_name(path.rsplit("/", 1)[-1]) else None)
    return sorted(groups, key=lambda path: path.count("/"), reverse=True)
