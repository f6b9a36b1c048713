"""The reader of a user's own labelled files: CSV, TSV and JSON Lines, to what the task models' `fit` takes."""

import csv
import dataclasses
import json
import os

from kbert.io.text_files import DataFormatError, read_text_lines

FILE_FORMATS = ("csv", "tsv", "jsonl")
_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".txt": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
               ".json": "jsonl"}
# The column names looked for when none is given, in order of preference.
TEXT_COLUMNS = ("text", "sentence", "sentence1", "text_a", "premise", "question", "content", "review", "comment")
TEXT_PAIR_COLUMNS = ("text_pair", "sentence2", "text_b", "hypothesis", "context")
# A multiple-choice record's choices: a JSON list of texts (`choices=True`).
CHOICE_COLUMNS = ("choices", "endings", "options", "answers")
LABEL_COLUMNS = ("label", "labels", "class", "category", "target", "gold_label", "sentiment", "intent", "score")
ID_COLUMNS = ("id", "idx", "index", "guid")
# A headerless file: `text<TAB>label`, or `text<TAB>text_pair<TAB>label`.
_HEADERLESS = {2: ("text", "label"), 3: ("text", "text_pair", "label")}


@dataclasses.dataclass(frozen=True)
class LabelledExamples:
    """The examples of one labelled file, in file order, each with the line it starts on.

    `x` is what the task models take (texts, or a tuple of two lists for
    pairs); unpacking gives `(x, labels)`, so
    `model.fit(*read_labelled_file("train.csv"))` works. Labels are as the
    file has them (strings, or the numbers of a JSON Lines file); a
    classifier with `class_names` takes the names as they are.
    """

    path: str
    texts: list
    text_pairs: list  # None for single texts
    labels: list  # None for a file without labels
    ids: list  # None without an id column
    line_numbers: list
    columns: dict  # role ("text", "text_pair", "label", "id") -> the column's name in the file
    file_format: str

    @property
    def x(self):
        return self.texts if self.text_pairs is None else (self.texts, self.text_pairs)

    def __iter__(self):
        return iter((self.x, self.labels))

    def __len__(self):
        return len(self.texts)

    def subset(self, indices):
        """The examples at `indices`, in that order."""

        def pick(values):
            return None if values is None else [values[i] for i in indices]

        return dataclasses.replace(self, texts=pick(self.texts), text_pairs=pick(self.text_pairs),
                                   labels=pick(self.labels), ids=pick(self.ids),
                                   line_numbers=pick(self.line_numbers))


def read_labelled_file(path, text_column=None, text_pair_column=None, label_column=None, id_column=None,
                       file_format=None, header=None, require_labels=True, column_names=None, choices=False):
    """Reads texts (or pairs), labels and ids from a CSV, TSV or JSON Lines file.

    Formats (by extension, or `file_format`):

    - `csv`: RFC 4180, with a header: fields quoted with `"` may hold
      commas, `""` and line breaks; a quote that is never closed, or a row
      with another number of fields than the header, is an error naming the
      line;
    - `tsv`: tab-separated, read without quote processing (a `"` is a
      character like any other, as in GLUE's files), with a header or,
      when the first row names no known column, without one: then
      `text<TAB>label` or `text<TAB>text_pair<TAB>label`;
    - `jsonl`: one JSON object per line.

    Columns are found by name: `text_column` etc., or else the first of
    `TEXT_COLUMNS`, `TEXT_PAIR_COLUMNS`, `LABEL_COLUMNS` and `ID_COLUMNS`
    that the file has (case-insensitive). Where no text or label column is
    found, the error lists the columns there are. The file is read through
    `kbert.io.text_files` (line ends, BOM, UTF-8 checks), streaming; every
    error names the file and the line. Empty lines of a TSV or JSONL file
    are skipped; no other row is ever dropped.

    Args:
        path: the file.
        text_column, text_pair_column, label_column, id_column: column
            names (JSON keys); None finds them by the names above.
        file_format: "csv", "tsv" or "jsonl"; None: from the extension.
        header: for a TSV file, whether its first row names the columns;
            None decides by whether it names a known column.
        require_labels: False reads a file without labels (for prediction).
        column_names: the names of a headerless CSV or TSV file's columns
            (CoLA's `source, label, mark, sentence`); its first row is then
            data.
        choices: read multiple-choice records of JSON Lines: the text is
            the context, `text_pairs` holds each record's list of choices
            (found among `CHOICE_COLUMNS`, or `text_pair_column`), the same
            number in every record, and the label is the right choice's
            index or text, read as its index.

    Returns:
        `LabelledExamples`.

    Example:
    >>> with open("reviews.csv", "w") as file:
    ...     _ = file.write('id,text,label\\n1,"Great, really great",pos\\n2,"Dull.\\nVery dull.",neg\\n')
    >>> examples = read_labelled_file("reviews.csv")
    >>> examples.texts, examples.labels, examples.ids
    (['Great, really great', 'Dull.\\nVery dull.'], ['pos', 'neg'], ['1', '2'])
    >>> x, y = examples
    """
    path = os.fspath(path)
    file_format = _file_format(path, file_format)
    records = iter_labelled_records(path, text_column, text_pair_column, label_column, id_column, file_format,
                                    header, require_labels, column_names, choices)
    texts, text_pairs, labels, ids, line_numbers = [], [], [], [], []
    for line_number, values in records:
        texts.append(values["text"])
        if "text_pair" in values:
            text_pairs.append(values["text_pair"])
        if "label" in values:
            labels.append(values["label"])
        if "id" in values:
            ids.append(values["id"])
        line_numbers.append(line_number)
    roles = records.roles
    return LabelledExamples(path=path, texts=texts, text_pairs=text_pairs if "text_pair" in roles else None,
                            labels=labels if "label" in roles else None, ids=ids if "id" in roles else None,
                            line_numbers=line_numbers, columns=roles, file_format=file_format)


def iter_labelled_records(path, text_column=None, text_pair_column=None, label_column=None, id_column=None,
                          file_format=None, header=None, require_labels=True, column_names=None, choices=False):
    """Streams `(line number, {role: value})` of a labelled file, as `read_labelled_file` reads it.

    Roles are "text", "text_pair", "label" and "id"; the iterator's `roles`
    maps each to its column once the first record is read. Memory is one
    record, whatever the file's size (`kbert predict --file` streams so).
    Takes `read_labelled_file`'s arguments.
    """
    return _Records(path, text_column, text_pair_column, label_column, id_column, file_format, header,
                    require_labels, column_names, choices)


class _Records:
    def __init__(self, path, text_column=None, text_pair_column=None, label_column=None, id_column=None,
                 file_format=None, header=None, require_labels=True, column_names=None, choices=False):
        self.path = os.fspath(path)
        self.file_format = _file_format(self.path, file_format)
        self.wanted = {"text": text_column, "text_pair": text_pair_column, "label": label_column,
                       "id": id_column}
        self.header = header
        self.require_labels = require_labels
        self.column_names = None if column_names is None else list(column_names)
        self.choices = choices
        self.num_choices = None
        self.first_line_number = None
        if choices and self.file_format != "jsonl":
            raise ValueError(f"{self.path}: multiple-choice examples are JSON Lines records (a list of choices "
                             "each), not {self.file_format}.")
        self.roles = None
        self._records = self._read()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._records)

    def _read(self):
        path, file_format = self.path, self.file_format
        if file_format == "jsonl":
            rows, columns = _json_rows(path), None
        elif self.column_names is not None:
            rows, columns = _csv_rows(path) if file_format == "csv" else _tsv_rows(path), self.column_names
        else:
            rows = _csv_rows(path) if file_format == "csv" else _tsv_rows(path)
            columns, rows = _header(path, rows, file_format, self.wanted, self.header)
        for line_number, row in rows:
            if self.roles is None:
                self.first_line_number = line_number
                self.roles = _roles(path, columns if columns is not None else list(row), self.wanted,
                                    self.require_labels, self.choices)
            roles = self.roles
            if columns is not None:
                if len(row) != len(columns):
                    shown = "\t".join(row) if file_format == "tsv" else ",".join(row)
                    raise DataFormatError(path, line_number, f"the row has {len(row)} fields where the header "
                                          f"has {len(columns)}", shown)
                row = dict(zip(columns, row))
            values = {}
            for role, column in roles.items():
                if column not in row:
                    raise DataFormatError(path, line_number, f"the record has no {column!r}", json.dumps(row))
                values[role] = row[column]
            for role in ("text",) if self.choices else ("text", "text_pair"):
                if role in values and not isinstance(values[role], str):
                    raise DataFormatError(path, line_number, f"{roles[role]!r} is not a text",
                                          json.dumps(values[role]))
            if self.choices:
                self._check_choices(line_number, values)
            if "label" in values and (values["label"] is None or values["label"] == ""):
                raise DataFormatError(path, line_number, f"the label ({roles['label']!r}) is empty")
            if "id" in values and not isinstance(values["id"], str):
                values["id"] = json.dumps(values["id"])
            yield line_number, values
        if self.roles is None:
            raise DataFormatError(path, None, "the file has no examples, only a header")

    def _check_choices(self, line_number, values):
        """A record's choices: a list of texts, as many as the first record's; its label as the right one's index."""
        options = values["text_pair"]
        if not isinstance(options, list) or not all(isinstance(option, str) for option in options) or not options:
            raise DataFormatError(self.path, line_number, f"{self.roles['text_pair']!r} is not a list of texts",
                                  json.dumps(options))
        self.num_choices = self.num_choices or len(options)
        if len(options) != self.num_choices:
            raise DataFormatError(self.path, line_number, f"the record has {len(options)} choices where the first "
                                  f"has {self.num_choices}; every example needs as many")
        if "label" in values:
            label = values["label"]
            if isinstance(label, str) and label in options:
                values["label"] = options.index(label)
            elif isinstance(label, str) and _is_integer(label):
                values["label"] = int(label)
            if not isinstance(values["label"], int) or isinstance(values["label"], bool) or not (
                    0 <= values["label"] < len(options)):
                raise DataFormatError(self.path, line_number, f"the label {label_name(label)!r} is neither a "
                                      f"choice's index (0 to {len(options) - 1}) nor one of its choices")


def _file_format(path, file_format):
    if file_format is not None:
        if file_format not in FILE_FORMATS:
            raise ValueError(f"Unknown file format {file_format!r}; kbert reads {list(FILE_FORMATS)}.")
        return file_format
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise ValueError(f"{path}: kbert cannot tell the format from the extension {extension!r}; name it "
                         f"(.csv, .tsv, .jsonl) or give the format ({', '.join(FILE_FORMATS)}).")
    return _EXTENSIONS[extension]


def _csv_rows(path):
    """`(first line number, fields)` of each CSV record; a quoted field may span lines."""
    lines = read_text_lines(path, long_lines="refuse")
    position = {"line": 0}

    def with_line_ends():
        for number, line in lines:
            position["line"] = number
            yield line + "\n"

    reader = csv.reader(with_line_ends(), strict=True)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            problem = ("a quoted field is never closed: its opening quote is on this line"
                       if "end of data" in str(error) else f"the record is not valid CSV ({error})")
            raise DataFormatError(path, start, problem) from None
        if row:  # an empty line
            yield start, row
        start = position["line"] + 1


def _tsv_rows(path):
    for number, line in read_text_lines(path, long_lines="refuse"):
        if line.strip():
            yield number, line.split("\t")


def _json_rows(path):
    for number, line in read_text_lines(path, long_lines="refuse"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as error:
            problem = f"the line is not JSON ({getattr(error, 'msg', 'nested too deeply')})"
            raise DataFormatError(path, number, problem, line) from None
        if not isinstance(record, dict):
            raise DataFormatError(path, number, "the line is not a JSON object ({...})", line)
        yield number, record


def _header(path, rows, file_format, wanted, header):
    """`(column names, the rows after the header)`; a headerless TSV gets the names of `_HEADERLESS`."""
    rows = iter(rows)
    try:
        line_number, first = next(rows)
    except StopIteration:
        raise DataFormatError(path, None, "the file has no rows") from None
    if file_format == "csv" or header:
        return _checked_names(path, line_number, first), rows
    known = {name.lower() for name in TEXT_COLUMNS + TEXT_PAIR_COLUMNS + LABEL_COLUMNS + ID_COLUMNS}
    known |= {name.lower() for name in wanted.values() if name}
    if header is None and any(field.strip().lower() in known for field in first):
        return _checked_names(path, line_number, first), rows
    if len(first) not in _HEADERLESS:
        raise DataFormatError(path, line_number, f"the first row names no known column, and a file without a "
                              f"header has 2 fields (text, label) or 3 (text, text_pair, label), not {len(first)}; "
                              "give the columns' names in a header", "\t".join(first))

    def again():
        yield line_number, first
        yield from rows

    return list(_HEADERLESS[len(first)]), again()


def _checked_names(path, line_number, names):
    names = [name.strip() for name in names]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataFormatError(path, line_number, f"the header names {repeated} more than once")
    return names


def _roles(path, names, wanted, require_labels, choices=False):
    """`{role: column name}` of the columns to read, given or found by name."""
    roles = {}
    defaults = {"text": TEXT_COLUMNS, "text_pair": CHOICE_COLUMNS if choices else TEXT_PAIR_COLUMNS,
                "label": LABEL_COLUMNS, "id": ID_COLUMNS}
    if choices:
        defaults["text"] = ("context",) + TEXT_COLUMNS
    by_lower = {str(name).lower(): name for name in names}
    for role, given in wanted.items():
        if given is not None:
            if given not in names:
                raise DataFormatError(path, None, f"there is no column {given!r} (for the {role}); the columns "
                                      f"are {list(names)}")
            roles[role] = given
            continue
        if role == "text_pair" and wanted["text"] is not None and not choices:
            continue  # a given text column is not paired with a guessed one
        found = next((by_lower[name] for name in defaults[role] if name in by_lower), None)
        if found is not None and found not in roles.values():
            roles[role] = found
    if choices and "text_pair" not in roles:
        raise DataFormatError(path, None, f"no column is the choices by its name ({', '.join(CHOICE_COLUMNS)}); "
                              f"the columns are {list(names)}: name it with `text_pair_column`",
                              names=["text_pair_column"])
    for role in ("text", "label") if require_labels else ("text",):
        if role not in roles:
            raise DataFormatError(path, None, f"no column is the {role} by its name; the columns are "
                                  f"{list(names)}: name it with `{role}_column`", names=[f"{role}_column"])
    return roles


def label_name(label):
    """A label as a class name: strings as they are, JSON numbers and booleans as JSON writes them."""
    return label if isinstance(label, str) else json.dumps(label)


def class_names_of(labels):
    """The classes of `labels` in a deterministic order: by value where all are integers, else sorted as text.

    >>> class_names_of(["spam", "ham", "spam"]), class_names_of(["10", "2", "1"]), class_names_of([1, 0])
    (['ham', 'spam'], ['1', '2', '10'], ['0', '1'])
    """
    names = {label_name(label) for label in labels}
    try:
        return sorted(names, key=int)
    except ValueError:
        return sorted(names)


def label_ids(examples, class_names):
    """The class id of each label of `examples`; a label not in `class_names` is an error naming its line."""
    index = {name: i for i, name in enumerate(class_names)}
    ids = []
    for label, line_number in zip(examples.labels, examples.line_numbers):
        name = label_name(label)
        if name not in index:
            raise DataFormatError(examples.path, line_number, f"the label {name!r} is not one of the classes "
                                  f"that training saw, {list(class_names)}")
        ids.append(index[name])
    return ids


def label_kind(labels):
    """What the labels ask for: `"multi-label"` (lists), `"regression"` (fractional numbers, or text of them), else `"classification"`.

    >>> label_kind(["spam", "ham"]), label_kind([["a", "b"], []]), label_kind(["3.800", "0.5"]), label_kind(["1", "2"])
    ('classification', 'multi-label', 'regression', 'classification')
    """
    if any(isinstance(label, list) for label in labels):
        return "multi-label"
    if any(isinstance(label, float) for label in labels):
        return "regression"
    if labels and all(isinstance(label, str) and _is_number(label) for label in labels) and not all(
            _is_integer(label) for label in labels):
        return "regression"
    return "classification"


def label_lists(examples, class_names=None, separators=",|"):
    """Each example's labels as a list of names: JSON lists as they are, text split at `separators`.

    With `class_names`, a label not among them is an error naming its file and line.
    """
    known = None if class_names is None else set(class_names)
    lists = []
    for label, line_number in zip(examples.labels, examples.line_numbers):
        if isinstance(label, list):
            names = [label_name(item) for item in label]
        else:
            text = label_name(label)
            for separator in separators[1:]:
                text = text.replace(separator, separators[0])
            names = [name.strip() for name in text.split(separators[0]) if name.strip()]
        if known is not None:
            unknown = [name for name in names if name not in known]
            if unknown:
                raise DataFormatError(examples.path, line_number, f"the label {unknown[0]!r} is not one of the "
                                      f"labels that training saw, {list(class_names)}")
        lists.append(names)
    return lists


def label_scores(examples):
    """Each example's label as a number (regression); one that is not a finite number is named with its line."""
    scores = []
    for label, line_number in zip(examples.labels, examples.line_numbers):
        try:
            score = float(label)
        except (TypeError, ValueError):
            score = float("nan")
        if isinstance(label, bool) or score != score or score in (float("inf"), float("-inf")):
            raise DataFormatError(examples.path, line_number, f"the label {label_name(label)!r} is not a number")
        scores.append(score)
    return scores


def _is_number(text):
    try:
        return float(text) == float(text)
    except ValueError:
        return False


def _is_integer(text):
    try:
        int(text)
        return True
    except ValueError:
        return False
