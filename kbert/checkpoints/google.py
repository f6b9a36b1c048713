"""Google's original BERT TensorFlow checkpoints (`bert_config.json`, `bert_model.ckpt.*`, `vocab.txt`)."""

import os
import re

import numpy as np

from kbert.checkpoints import huggingface
from kbert.checkpoints.checkpoint_files import CheckpointError, check_finite, read_json

CONFIG_FILE = "bert_config.json"
VOCABULARY_FILE = "vocab.txt"

# Training state stored beside the weights; not part of the model.
_SKIPPED = re.compile(r"(^|/)(adam_[mv]|global_step|Adam(_\d+)?|beta[12]_power)($|/)|/adam_[mv]$")


def checkpoint_prefix(folder):
    """The checkpoint prefix inside a Google BERT folder, or None."""
    import tensorflow as tf

    if not os.path.isdir(folder) or not os.path.exists(os.path.join(folder, CONFIG_FILE)):
        return None
    # The `checkpoint` file may name a prefix anywhere (an absolute path of the
    # machine that wrote it, "../", a URL): only its file name is looked for,
    # in this folder.
    state = tf.train.get_checkpoint_state(folder)
    names = [os.path.basename(state.model_checkpoint_path)] if state and state.model_checkpoint_path else []
    for name in names + ["bert_model.ckpt"]:
        candidate = os.path.join(folder, name)
        if os.path.exists(candidate + ".index"):
            return candidate
    return None


def huggingface_name(name):
    """Hugging Face's name for a Google checkpoint variable, or None for training state."""
    if _SKIPPED.search(name):
        return None
    name = re.sub(r"layer_(\d+)", r"layer.\1", name)
    name = name.removeprefix("bert/").replace("/", ".")
    name = name.replace("cls.predictions.output_bias", "cls.predictions.bias")
    name = name.replace("cls.seq_relationship.output_weights", "cls.seq_relationship.weight")
    name = name.replace("cls.seq_relationship.output_bias", "cls.seq_relationship.bias")
    for ours, theirs in ((".gamma", ".weight"), (".beta", ".bias"), (".kernel", ".weight")):
        if name.endswith(ours):
            name = name[: -len(ours)] + theirs
    if name.endswith("_embeddings"):
        name += ".weight"  # the tables have no suffix in Google's names
    return name


# The tensors whose shapes a config's sizes are checked against, as Google's checkpoints name them.
_CHECKED_TENSORS = {
    "embeddings.word_embeddings.weight": "bert/embeddings/word_embeddings",
    "embeddings.position_embeddings.weight": "bert/embeddings/position_embeddings",
    "embeddings.token_type_embeddings.weight": "bert/embeddings/token_type_embeddings",
    "encoder.layer.0.intermediate.dense.weight": "bert/encoder/layer_0/intermediate/dense/kernel",
}


def _as_google_names_it(targets, shapes):
    """How an error names a tensor of this checkpoint: by its variable's name and shape, not Hugging Face's."""
    originals = {target: name for name, target in targets.items() if target is not None}

    def shown(name, shape):
        original = originals.get(name)
        if original is None:
            return _CHECKED_TENSORS.get(name, name)
        return f"{original} of shape {tuple(shapes[original])}"

    return shown


def encoder_arguments(config, source):
    """`kbert.Encoder` arguments from a `bert_config.json` dict (`source` names the file in errors).

    Its keys are the ones Hugging Face's BERT `config.json` kept, and are
    checked the same way (`huggingface.encoder_arguments`).
    """
    return huggingface.encoder_arguments(config, source)


def read_google_checkpoint(folder):
    """Returns `(config, tensors)`: the BERT config dict and tensors under Hugging Face names and layouts.

    A config that does not parse, a checkpoint that TensorFlow cannot read
    (truncated, damaged) or a tensor with NaN or infinity fails with a
    `CheckpointError` naming the file (and tensor). The config is checked
    against the shapes the checkpoint's index declares (which must fit in
    its data files) before any tensor is read.
    """
    import tensorflow as tf

    prefix = checkpoint_prefix(folder)
    if prefix is None:
        raise FileNotFoundError(f"{folder} has no {CONFIG_FILE} with a bert_model.ckpt beside it.")
    config_path = os.path.join(folder, CONFIG_FILE)
    config = read_json(config_path)
    arguments = encoder_arguments(config, config_path)
    tensors = {}
    name = None
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        _check_declared_bytes(prefix, shapes, reader.get_variable_to_dtype_map())
        targets = {name: huggingface_name(name) for name in shapes}
        huggingface.check_config_against_tensors(arguments, {
            target: tuple(shapes[name])[::-1] if name.endswith("/kernel") else tuple(shapes[name])
            for name, target in targets.items() if target is not None
        }, config_path, prefix, shown=_as_google_names_it(targets, shapes))
        for name, target in targets.items():
            if target is None:
                continue
            value = np.asarray(reader.get_tensor(name))
            check_finite({name: value}, prefix)
            if name.endswith("/kernel"):
                value = value.T  # Google stores dense kernels (in, out); Hugging Face (out, in).
            tensors[target] = value
    except CheckpointError:
        raise  # a non-finite tensor, or a size the config and the tensors disagree on, named already
    except (tf.errors.OpError, IndexError, ValueError) as error:
        # TensorFlow's reader raises IndexError for a truncated data file; its
        # messages run over several lines and name its own source files.
        reason = (str(getattr(error, "message", error)).strip().splitlines() or [type(error).__name__])[0]
        where = f"reading {name}: " if name else ""
        raise CheckpointError(
            prefix, f"not a readable TensorFlow checkpoint (truncated or damaged?): {where}{reason}", key=name
        ) from None
    return config, tensors


def _check_declared_bytes(prefix, shapes, dtypes):
    """The tensors an index declares must fit in the checkpoint's data files (TensorFlow allocates them first)."""
    import glob

    declared = 0
    for name, shape in shapes.items():
        dtype = dtypes.get(name)
        size = getattr(dtype, "size", 0) if dtype is not None and dtype.name != "string" else 0
        declared += int(np.prod(shape, dtype=object)) * size
    held = sum(os.path.getsize(path) for path in glob.glob(glob.escape(prefix) + ".data-*"))
    if declared > held + (1 << 20):
        raise CheckpointError(
            prefix, f"its index declares {declared:,} bytes of tensors, but its data files hold {held:,}; "
            "the checkpoint is truncated or damaged."
        )
