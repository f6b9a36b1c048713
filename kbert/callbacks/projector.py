"""Sentence vectors and their texts for TensorBoard's embedding projector."""

import os

import numpy as np

CONFIG_NAME = "projector_config.pbtxt"
METADATA_NAME = "metadata.tsv"
VECTORS_NAME = "vectors.tsv"


def write_projector(embedder, texts, log_dir, labels=None, name="sentence_embedding", batch_size=None,
                    class_names=None):
    """Writes the vectors of `texts` where TensorBoard's Projector finds them.

    `log_dir` becomes a run of TensorBoard that holds, besides any event
    files already there:

    - `vectors.tsv`: the vectors (`embedder.embed(texts)`), one line per
      text, tab-separated;
    - `metadata.tsv`: the texts, one line per vector (with `labels`, two
      columns under a header `text`/`label`, so the Projector can colour
      the points by label);
    - `projector_config.pbtxt`: names both, the vectors as `name`;
    - an event file when it has none, so that TensorBoard lists the folder
      as a run and its Projector tab finds it from any parent folder.

    Give it a run of the `TensorBoard` callback's log dir (e.g.
    `<log_dir>/validation` for the vectors of the validation texts) or a
    folder of its own, then run `tensorboard --logdir` on that folder or any
    parent and open the Projector tab: the texts in PCA, t-SNE or UMAP, with
    each text's nearest neighbours.

    Tabs and line breaks inside texts become spaces (a metadata line is one
    vector). Writing again to the same `log_dir` replaces the vectors and
    texts written there.

    Args:
        embedder: a `kbert.Embedder`, or anything whose `embed(texts)` gives
            an array `(len(texts), dimension)`.
        texts: the texts (or `(texts_a, texts_b)` pairs, shown joined by
            " | ") to embed.
        log_dir: the folder to write to (created if missing).
        labels: optional labels of the texts (classes, sources) to colour
            points by.
        name: the name of the vectors in the Projector.
        batch_size: texts per `embed` batch.
        class_names: names of integer `labels` (`class_names[label]` is
            written), e.g. a classifier's `class_names`.

    Returns:
        The path of `projector_config.pbtxt`.

    Example:
    >>> import tempfile
    >>> vocab = kbert.learn_vocabulary(["the cat sat", "a dog ran"] * 5, vocabulary_size=40, verbose=False)
    >>> embedder = kbert.embedder("tiny", vocabulary=vocab, sequence_length=8)
    >>> log_dir = tempfile.mkdtemp()
    >>> path = write_projector(embedder, ["the cat sat", "a dog ran"], log_dir, labels=[1, 0],
    ...                        class_names=["dogs", "cats"])
    >>> sorted(name for name in os.listdir(log_dir) if "tfevents" not in name)
    ['metadata.tsv', 'projector_config.pbtxt', 'vectors.tsv']
    >>> open(os.path.join(log_dir, "metadata.tsv")).read().splitlines()
    ['text\\tlabel', 'the cat sat\\tcats', 'a dog ran\\tdogs']
    """
    from google.protobuf import text_format
    from tensorboard.plugins import projector

    from kbert.io.atomic_files import write_atomically

    if not hasattr(embedder, "embed"):
        raise TypeError(
            f"`embedder` must have an `embed(texts)` method (a kbert.Embedder), got a "
            f"{type(embedder).__name__}."
        )
    if not isinstance(name, str) or not name.strip() or _one_line(name) != name:
        raise ValueError(f"`name` must be a non-empty one-line string, got {name!r}.")
    shown = _shown_texts(texts)
    if not shown:
        raise ValueError("`texts` is empty: give at least one text to embed.")
    if labels is not None and len(labels) != len(shown):
        raise ValueError(f"Got {len(labels)} labels for {len(shown)} texts.")
    if labels is not None and class_names is not None:
        labels = [_class_name(label, class_names) for label in labels]
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

    def write_lines(rows):
        def write(path):
            with open(path, "w", encoding="utf-8") as file:
                file.write("\n".join(rows) + "\n")

        return write

    # float32 printed with 9 significant digits reads back to the same value.
    vector_lines = ["\t".join(f"{value:.9g}" for value in row) for row in vectors.tolist()]
    write_atomically(os.path.join(log_dir, VECTORS_NAME), write_lines(vector_lines))
    write_atomically(os.path.join(log_dir, METADATA_NAME), write_lines(lines))

    config = projector.ProjectorConfig()
    embedding = config.embeddings.add()
    embedding.tensor_name = name
    embedding.tensor_path = VECTORS_NAME  # paths relative to the config's folder: it can move
    embedding.metadata_path = METADATA_NAME
    embedding.tensor_shape.extend(vectors.shape)
    config_path = os.path.join(log_dir, CONFIG_NAME)
    write_atomically(config_path, write_lines([text_format.MessageToString(config).rstrip("\n")]))
    _make_a_run(log_dir)
    return config_path


def _make_a_run(log_dir):
    """Gives `log_dir` an event file if it has none: TensorBoard's runs are the folders with one."""
    if any("tfevents" in entry for entry in os.listdir(log_dir)):
        return
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    EventFileWriter(log_dir).close()


def _class_name(label, class_names):
    if isinstance(label, (str, bytes)):
        return label
    index = int(label)
    if index != label or not 0 <= index < len(class_names):
        raise ValueError(f"Label {label!r} has no class name among {len(class_names)} `class_names`.")
    return class_names[index]


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
