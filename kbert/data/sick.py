"""Reader for SICK (Sentences Involving Compositional Knowledge): NLI and relatedness pairs."""

import math
from pathlib import Path

from kbert.data.paths import DataSource, find_data_file
from kbert.io.text_files import DataFormatError, read_text_lines

SICK_FILE = "sick/SICK.txt"
# The release is a zip behind a web page; the reader does not fetch it.
SICK_SOURCE = DataSource(url="https://marcobaroni.org/composes/sick.html", automatic=False)
SICK_HEADER = (
    "pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score",
    "entailment_AB", "entailment_BA", "sentence_A_original", "sentence_B_original",
    "sentence_A_dataset", "sentence_B_dataset", "SemEval_set",
)  # fmt: skip
SICK_LABEL_NAMES = ("entailment", "neutral", "contradiction")
# The file's own split names, from its `SemEval_set` column; TRIAL is the usual dev set.
SICK_SPLITS = {"train": "TRAIN", "trial": "TRIAL", "test": "TEST"}


def load_sick(split, path=None, relatedness=False):
    """Loads one split of SICK as sentence pairs with 3-class entailment labels.

    SICK's 9,840 pairs are split by the file's own `SemEval_set` column
    (the SemEval-2014 Task 1 split): 4,439 train, 495 trial (the dev set)
    and 4,906 test pairs, in file order. Labels are ints indexing
    `SICK_LABEL_NAMES`: entailment 0, neutral 1, contradiction 2. Each pair
    also has a relatedness score from 1 (unrelated) to 5 (very related).

    Args:
        split: "train", "trial" or "test".
        path: the `SICK.txt` file to read. Defaults to `sick/SICK.txt` under
            `data_dir()`.
        relatedness: also return the relatedness scores.

    Returns:
        `((sentences_a, sentences_b), labels)`, the form `Classifier.fit`
        takes as `fit(pairs, labels)`; with `relatedness=True`,
        `((sentences_a, sentences_b), labels, scores)` with float scores.

    Example:
    >>> (premises, hypotheses), labels = load_sick("trial")
    >>> len(premises), premises[0], hypotheses[0], SICK_LABEL_NAMES[labels[0]]
    (495, 'The young boys are playing outdoors and the man is smiling nearby', 'There is no boy playing outdoors and there is no man smiling', 'contradiction')
    >>> _, _, scores = load_sick("trial", relatedness=True)
    >>> scores[:3]
    [3.6, 3.4, 3.8]

    A three-class pair classifier trains on it as is:
    `kbert.classifier("base", num_classes=3, vocabulary=...).fit((premises, hypotheses), labels)`.

    Raises:
        ValueError: unknown split.
        DataFormatError: the header or a row is malformed (the message gives
            file and line), or the file has no row of the split.
    """
    if split not in SICK_SPLITS:
        raise ValueError(
            f"Unknown SICK split {split!r}. Choose one of: {', '.join(SICK_SPLITS)} "
            "(trial is the dev set)."
        )
    if path is None:
        path = find_data_file(SICK_FILE, SICK_SOURCE)
    path = Path(path)
    wanted = SICK_SPLITS[split]

    # An empty file fails the header check below, which names the file.
    lines = read_text_lines(path, allow_empty=True)
    line_number, line = next(lines, (1, ""))
    if tuple(line.split("\t")) != SICK_HEADER:
        expected = "\\t".join(SICK_HEADER[:4]) + "\\t..."
        raise DataFormatError(path, line_number, f"expected the SICK header {expected!r}, found", line)

    column = {name: index for index, name in enumerate(SICK_HEADER)}
    sentences_a, sentences_b, labels, scores = [], [], [], []
    for line_number, line in lines:
        fields = line.split("\t")
        if len(fields) != len(SICK_HEADER):
            problem = f"expected {len(SICK_HEADER)} tab-separated columns, found {len(fields)}"
            raise DataFormatError(path, line_number, problem, line)
        row_split = fields[column["SemEval_set"]]
        if row_split not in SICK_SPLITS.values():
            problem = f"unknown SemEval_set {row_split!r}, expected one of {list(SICK_SPLITS.values())}"
            raise DataFormatError(path, line_number, problem, line)
        # Every row is checked, whatever the split, so a bad file fails the same way each time.
        label = fields[column["entailment_label"]].lower()
        if label not in SICK_LABEL_NAMES:
            problem = (
                f"unknown entailment_label {fields[column['entailment_label']]!r}, expected one of "
                f"{[name.upper() for name in SICK_LABEL_NAMES]}"
            )
            raise DataFormatError(path, line_number, problem, line)
        score = _relatedness(fields[column["relatedness_score"]])
        if score is None:
            problem = f"relatedness_score {fields[column['relatedness_score']]!r} is not a number from 1 to 5"
            raise DataFormatError(path, line_number, problem, line)
        sentence_a, sentence_b = fields[column["sentence_A"]].strip(), fields[column["sentence_B"]].strip()
        if not sentence_a or not sentence_b:
            raise DataFormatError(path, line_number, "a sentence of the pair is empty", line)
        if row_split != wanted:
            continue
        sentences_a.append(sentence_a)
        sentences_b.append(sentence_b)
        labels.append(SICK_LABEL_NAMES.index(label))
        scores.append(score)
    if not labels:
        raise DataFormatError(path, None, f"the file has no row whose SemEval_set is {wanted}")

    pairs = (sentences_a, sentences_b)
    return (pairs, labels, scores) if relatedness else (pairs, labels)


def _relatedness(text):
    try:
        score = float(text)
    except ValueError:
        return None
    return score if math.isfinite(score) and 1.0 <= score <= 5.0 else None
