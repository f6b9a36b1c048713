"""Sentence vectors and their texts for TensorBoard's embedding projector."""

import os

import numpy as np

CONFIG_NAME = "projector_config.pbtxt"
METADATA_NAME = "metadata.tsv"
CHECKPOINT_PREFIX = "embeddings.ckpt"


def write_projector(embedder, texts, log_dir, labels=None, name="sentence_embedding", batch_size=None):
    """Writes the vectors of `texts` where TensorBoard's Projector finds them.

    The vectors (`embedder.embed(texts)`, one row per text) are saved as the
    variable `name` of a TensorFlow checkpoint in `log_dir`, the texts as
    `metadata.tsv` next to it (one line per vector; with `labels`, two
    columns under a header `text`/`label`), and `projector_config.pbtxt`
    names the checkpoint's tensor and the metadata file. Run
    `tensorboard --logdir LOG_DIR` (or a parent folder) and open the
    Projector tab to see the texts in PCA, t-SNE or UMAP, with each text's
    nearest neighbours.

    Tabs and line breaks inside texts become spaces (a metadata line is one
    vector). Writing again to the same `log_dir` replaces what was there.

    Args:
        embedder: a `kbert.Embedder`, or anything whose `embed(texts)` gives
            an array `(len(texts), dimension)`.
        texts: the texts (or `(texts_a, texts_b)` pairs, shown joined by
            " | ") to embed.
        log_dir: the folder to write to (created if missing).
        labels: optional labels of the texts (classes, sources) to colour
            points by.
        name: the name of the vectors in the checkpoint and the Projector.
        batch_size: texts per `embed` batch.

    Returns:
        The path of `projector_config.pbtxt`.

    Example:
    >>> import tempfile
    >>> vocab = kbert.learn_vocabulary(["the cat sat", "a dog ran"] * 5, vocabulary_size=40, verbose=False)
    >>> embedder = kbert.embedder("tiny", vocabulary=vocab, sequence_length=8)
    >>> log_dir = tempfile.mkdtemp()
    >>> path = write_projector(embedder, ["the cat sat", "a dog ran"], log_dir)
    >>> sorted(name for name in os.listdir(log_dir) if not name.startswith("embeddings.ckpt"))
    ['checkpoint', 'metadata.tsv', 'projector_config.pbtxt']
    """
    import tensorflow as tf
    from google.protobuf import text_format
    from tensorboard.plugins import projector

    from kbert.atomic_files import write_atomically

    if not hasattr(embedder, "embed"):
        raise TypeError(
            f"`embedder` must have an `embed(texts)` method (a kbert.Embedder), got a "
            f"{type(embedder).__name__}."
        )
    if not name.isidentifier():
        raise ValueError(f"`name` must be a Python identifier (a checkpoint attribute), got {name!r}.")
    shown = _shown_texts(texts)
    if not shown:
        raise ValueError("`texts` is empty: give at least one text to embed.")
    if labels is not None and len(labels) != len(shown):
        raise ValueError(f"Got {len(labels)} labels for {len(shown)} texts.")
    vectors = np.asarray(embedder.embed(texts, batch_size=batch_size), "float32")
    if vectors.ndim != 2 or len(vectors) != len(shown):
        raise ValueError(
            f"`embed` gave shape {vectors.shape} for {len(shown)} texts; the Projector needs one "
            "vector per text, shape (texts, dimension)."
        )

    log_dir = os.fspath(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    lines = [_one_line(text) for text in shown]
    if labels is not None:
        lines = ["text\tlabel"] + [f"{line}\t{_one_line(str(label))}" for line, label in zip(lines, labels)]

    def write_metadata(path):
        with open(path, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")

    write_atomically(os.path.join(log_dir, METADATA_NAME), write_metadata)
    checkpoint = tf.train.Checkpoint(**{name: tf.Variable(vectors, name=name)})
    # `save` also writes the `checkpoint` state file, by which the Projector
    # finds the newest checkpoint of the folder (relative paths: the folder
    # can move).
    checkpoint.save(os.path.join(log_dir, CHECKPOINT_PREFIX))

    config = projector.ProjectorConfig()
    embedding = config.embeddings.add()
    embedding.tensor_name = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
    embedding.metadata_path = METADATA_NAME  # relative to the config's folder
    config_path = os.path.join(log_dir, CONFIG_NAME)

    def write_config(path):
        with open(path, "w", encoding="utf-8") as file:
            file.write(text_format.MessageToString(config))

    write_atomically(config_path, write_config)
    return config_path


def _shown_texts(texts):
    """One display string per example: a text, or a pair joined by ' | '."""
    if isinstance(texts, str):
        raise TypeError("`texts` must be a list of texts (or a (texts_a, texts_b) pair), not one string.")
    if isinstance(texts, tuple) and len(texts) == 2 and not isinstance(texts[0], str):
        first, second = texts
        if len(first) != len(second):
            raise ValueError(f"Text pairs need as many second texts ({len(second)}) as first ({len(first)}).")
        return [f"{_text(a)} | {_text(b)}" for a, b in zip(first, second)]
    return [_text(text) for text in texts]


def _text(text):
    return text.decode("utf-8") if isinstance(text, bytes) else str(text)


def _one_line(text):
    return " ".join(text.replace("\t", " ").splitlines()) or " "
