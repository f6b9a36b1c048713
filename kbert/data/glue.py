"""Reader for the GLUE TSV files of SST-2, RTE and MRPC."""

import dataclasses
from pathlib import Path

from kbert.data.paths import DataFormatError, DataSource, find_data_file, read_lines

GLUE_SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """How one GLUE task's files are laid out.

    Columns are named as in the file headers; the test split has no label
    column and its own header.
    """

    folder: str
    labelled_header: tuple
    test_header: tuple
    text_columns: tuple
    label_column: str
    label_values: tuple  # Raw label strings, in the order of `label_names`.
    label_names: tuple
    source_url: str
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


def load_glue(task, split, path=None):
    """Loads one split of a GLUE task.

    Texts have their surrounding whitespace stripped (GLUE ends each SST-2
    sentence with a space). Labels are ints indexing the task's
    `label_names`, or None for the test split, whose labels GLUE withholds.

    Args:
        task: "sst2", "rte" or "mrpc" (case-insensitive; "SST-2" also works).
        split: "train", "dev" or "test".
        path: the TSV file to read. Defaults to `glue/<TASK>/<split>.tsv`
            under `data_dir()`.

    Returns:
        `(texts, labels)` for SST-2; `((texts_a, texts_b), labels)` for the
        sentence-pair tasks RTE and MRPC.

    Example:
    >>> texts, labels = load_glue("sst2", "dev")
    >>> texts[0], GLUE_TASKS["sst2"].label_names[labels[0]]
    ("it 's a charming and often affecting journey .", 'positive')
    >>> (premises, hypotheses), labels = load_glue("rte", "dev")

    Raises:
        ValueError: unknown task or split.
        DataFormatError: the header or a row is malformed.
    """
    info = get_glue_task(task)
    if split not in GLUE_SPLITS:
        raise ValueError(f"Unknown GLUE split {split!r}. Choose one of: {', '.join(GLUE_SPLITS)}.")
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
    lines = read_lines(path)
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

    texts = tuple(columns) if info.is_pair else columns[0]
    return texts, labels
