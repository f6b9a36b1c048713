"""Reader for the GLUE TSV files of SST-2, RTE and MRPC."""

import dataclasses
from pathlib import Path

from kbert.data.paths import DataSource, find_data_file
from kbert.data.tfds_source import check_source, class_names, describe, tfds_examples
from kbert.io.text_files import DataFormatError, read_text_lines

GLUE_SPLITS = ("train", "dev", "test")
# kbert's split names -> TensorFlow Datasets'.
GLUE_TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """How one GLUE task's files are laid out.

    Columns are named as in the file headers; the test split has no label
    column and its own header. The `tfds_*` fields say where the same data
    is in TensorFlow Datasets: the text features, and TFDS's label names in
    the order of `label_names`.
    """

    folder: str
    labelled_header: tuple
    test_header: tuple
    text_columns: tuple
    label_column: str
    label_values: tuple  # Raw label strings, in the order of `label_names`.
    label_names: tuple
    source_url: str
    tfds_name: str
    tfds_text_features: tuple
    tfds_label_names: tuple
    downloadable: bool = True

    @property
    def is_pair(self):
        return len(self.text_columns) == 2


GLUE_TASKS = {
    "sst2": GlueTask(
        folder="SST-2",
        labelled_header=("sentence", "label"),
        test_header=("index", "sentence"),
        text_columns=("sentence",),
        label_column="label",
        label_values=("0", "1"),
        label_names=("negative", "positive"),
        source_url="https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        tfds_name="glue/sst2",
        tfds_text_features=("sentence",),
        tfds_label_names=("negative", "positive"),
    ),
    "rte": GlueTask(
        folder="RTE",
        labelled_header=("index", "sentence1", "sentence2", "label"),
        test_header=("index", "sentence1", "sentence2"),
        text_columns=("sentence1", "sentence2"),
        label_column="label",
        label_values=("entailment", "not_entailment"),
        label_names=("entailment", "not_entailment"),
        source_url="https://dl.fbaipublicfiles.com/glue/data/RTE.zip",
        tfds_name="glue/rte",
        tfds_text_features=("sentence1", "sentence2"),
        tfds_label_names=("entailment", "not_entailment"),
    ),
    "mrpc": GlueTask(
        folder="MRPC",
        labelled_header=("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        test_header=("index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        label_values=("0", "1"),
        label_names=("not_paraphrase", "paraphrase"),
        # GLUE builds the MRPC TSVs from Microsoft's installer; no zip to fetch.
        source_url="https://gluebenchmark.com/tasks",
        tfds_name="glue/mrpc",
        tfds_text_features=("sentence1", "sentence2"),
        tfds_label_names=("not_equivalent", "equivalent"),
        downloadable=False,
    ),
}


def get_glue_task(task):
    """Returns the `GlueTask` for a name such as "sst2", "SST-2", "rte" or "MRPC"."""
    key = str(task).lower().replace("-", "")
    if key not in GLUE_TASKS:
        choices = ", ".join(f"{key!r} ({info.folder})" for key, info in GLUE_TASKS.items())
        raise ValueError(f"Unknown GLUE task {task!r}. Choose one of: {choices}.")
    return GLUE_TASKS[key]


def load_glue(task, split, path=None, source="local"):
    """Loads one split of a GLUE task, from its TSV file or from TensorFlow Datasets.

    Texts have their surrounding whitespace stripped (GLUE ends each SST-2
    sentence with a space). Labels are ints indexing the task's
    `label_names`, or None for the test split, whose labels GLUE withholds.

    With `source="tfds"` the split comes from TensorFlow Datasets
    (`glue/sst2`, `glue/rte`, `glue/mrpc`; "dev" is TFDS's "validation"),
    downloaded on first use: texts and labels come out as from the files,
    TFDS's label ids mapped to kbert's by name (MRPC's "equivalent" is
    "paraphrase"), in GLUE's row order (TFDS's `idx`).

    Args:
        task: "sst2", "rte" or "mrpc" (case-insensitive; "SST-2" also works).
        split: "train", "dev" or "test".
        path: the TSV file to read. Defaults to `glue/<TASK>/<split>.tsv`
            under `data_dir()`.
        source: "local" (the TSV files, offline) or "tfds".

    Returns:
        `(texts, labels)` for SST-2; `((texts_a, texts_b), labels)` for the
        sentence-pair tasks RTE and MRPC.

    Example:
    >>> texts, labels = load_glue("sst2", "dev")
    >>> texts[0], GLUE_TASKS["sst2"].label_names[labels[0]]
    ("it 's a charming and often affecting journey .", 'positive')
    >>> (premises, hypotheses), labels = load_glue("rte", "dev")

    Raises:
        ValueError: unknown task, split or source.
        DataFormatError: the header or a row is malformed, the file has no
            rows, or a TFDS train or dev example has no label.
    """
    info = get_glue_task(task)
    if split not in GLUE_SPLITS:
        raise ValueError(f"Unknown GLUE split {split!r}. Choose one of: {', '.join(GLUE_SPLITS)}.")
    if check_source(source) == "tfds":
        if path is not None:
            raise ValueError("Give a `path` to read or source='tfds', not both.")
        return _load_glue_tfds(info, split)
    if path is None:
        member = f"{info.folder}/{split}.tsv"
        source = DataSource(info.source_url, member, automatic=info.downloadable)
        path = find_data_file(f"glue/{member}", source)
    path = Path(path)

    has_labels = split != "test"
    header = info.labelled_header if has_labels else info.test_header
    text_indices = [header.index(column) for column in info.text_columns]
    label_index = header.index(info.label_column) if has_labels else None

    # Sentences contain quote characters, so the files must be split on tabs
    # alone; a csv reader would join quoted rows.
    # An empty file fails the header check below, which names the file.
    lines = read_text_lines(path, allow_empty=True)
    line_number, line = next(lines, (1, ""))
    if tuple(line.split("\t")) != header:
        expected = "\\t".join(header)
        raise DataFormatError(path, line_number, f"expected the header {expected!r}, found", line)

    columns = [[] for _ in text_indices]
    labels = [] if has_labels else None
    for line_number, line in lines:
        fields = line.split("\t")
        if len(fields) != len(header):
            problem = f"expected {len(header)} tab-separated columns, found {len(fields)}"
            raise DataFormatError(path, line_number, problem, line)
        for texts, index in zip(columns, text_indices):
            texts.append(fields[index].strip())
        if has_labels:
            label = fields[label_index]
            if label not in info.label_values:
                problem = f"unknown label {label!r}, expected one of {list(info.label_values)}"
                raise DataFormatError(path, line_number, problem, line)
            labels.append(info.label_values.index(label))
    if not columns[0]:
        raise DataFormatError(path, None, "the file has the header but no rows")

    texts = tuple(columns) if info.is_pair else columns[0]
    return texts, labels


def _load_glue_tfds(info, split):
    """A GLUE split from TensorFlow Datasets, in the structure of the TSV reader."""
    tfds_split = GLUE_TFDS_SPLITS[split]
    where = describe(info.tfds_name, tfds_split)
    examples, dataset_info = tfds_examples(info.tfds_name, tfds_split)
    theirs = class_names(dataset_info, "label")
    if sorted(theirs) != sorted(info.tfds_label_names):
        raise ValueError(
            f"{where} has the labels {theirs}; kbert maps {list(info.tfds_label_names)} to "
            f"{list(info.label_names)}."
        )
    # TFDS id -> kbert id, matched by name so that a reordering in TFDS cannot swap classes.
    ours = [info.tfds_label_names.index(name) for name in theirs]
    # TFDS shuffles examples when it prepares a split; `idx` is the row in GLUE's file.
    examples.sort(key=lambda example: example["idx"])
    columns = [[example[name].strip() for example in examples] for name in info.tfds_text_features]
    labels = None
    if split != "test":  # GLUE withholds test labels (TFDS stores -1)
        unlabelled = [example["idx"] for example in examples if example["label"] < 0]
        if unlabelled:
            raise DataFormatError(
                where, None, f"{len(unlabelled)} examples have no label (-1), e.g. idx {unlabelled[:3]}"
            )
        labels = [ours[example["label"]] for example in examples]
    texts = tuple(columns) if info.is_pair else columns[0]
    return texts, labels
