"""Reader for CoNLL-format named-entity files, CoNLL-2003 English in particular."""

from pathlib import Path

from kbert.data.paths import DataSource, find_data_file
from kbert.data.tfds_source import check_source, class_names, describe, tfds_examples
from kbert.io.text_files import DataFormatError, read_text_lines

CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
CONLL2003_SPLITS = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
CONLL_SCHEMES = ("iob1", "iob2", "bioes", "auto")

# The organisers distribute only the annotations; the Reuters text needs a
# research agreement, so there is no file to fetch.
CONLL2003_SOURCE = DataSource(
    url="https://www.clips.uantwerpen.be/conll2003/ner/", automatic=False
)
DOCUMENT_START = "-DOCSTART-"
CONLL2003_TFDS_NAME = "conll2003"


def load_conll2003(split, path=None, source="local"):
    """Loads one split of CoNLL-2003 English NER, with tags in IOB2, from its file or from TFDS.

    The files use IOB1, where an entity may start with `I-`; the tags are
    converted to IOB2, where every entity starts with `B-`. Tags are strings
    from `CONLL2003_LABELS`.

    With `source="tfds"` the split comes from TensorFlow Datasets'
    `conll2003` (same split names), downloaded on first use: its `tokens`
    and its `ner` tag ids, turned into tag strings by TFDS's tag names and
    converted to IOB2 the same way, in TFDS's sentence order.

    Args:
        split: `"train"` (eng.train), `"dev"` (eng.testa) or `"test"`
            (eng.testb).
        path: the file to read. Defaults to `conll2003/<file>` under
            `data_dir()`.
        source: "local" (the files, offline) or "tfds".

    Returns:
        `(sentences, tags)`: parallel lists with one list of words and one
        list of tags per sentence.

    Example:
    >>> sentences, tags = load_conll2003("train")
    >>> len(sentences), sum(len(s) for s in sentences)
    (14041, 203621)
    >>> list(zip(sentences[0], tags[0]))[:3]
    [('EU', 'B-ORG'), ('rejects', 'O'), ('German', 'B-MISC')]

    Raises:
        ValueError: unknown split or source.
        DataFormatError: a malformed line; the message names file and line.
    """
    if split not in CONLL2003_SPLITS:
        raise ValueError(
            f"Unknown CoNLL-2003 split {split!r}. Choose one of: {', '.join(CONLL2003_SPLITS)}."
        )
    if check_source(source) == "tfds":
        if path is not None:
            raise ValueError("Give a `path` to read or source='tfds', not both.")
        return _load_conll2003_tfds(split)
    if path is None:
        path = find_data_file(f"conll2003/{CONLL2003_SPLITS[split]}", CONLL2003_SOURCE)
    return read_conll(path, scheme="iob1", labels=CONLL2003_LABELS, num_columns=4)


def read_conll(path, scheme="iob1", labels=None, num_columns=4, tag_column=-1):
    """Reads a CoNLL-format file of tagged words: one word per line.

    Each line holds whitespace-separated columns: the word first, the tag
    last (CoNLL-2003: `word POS chunk NER`). Blank lines and `-DOCSTART-`
    lines end a sentence; empty sentences are not returned.

    Tags are `O`, `B-TYPE` or `I-TYPE`. With `scheme="iob1"` (CoNLL-2003's
    original scheme: `I-` may start an entity, `B-` only starts one that
    directly follows an entity of the same type) tags are converted to IOB2:
    an `I-TYPE` that does not continue a `TYPE` entity becomes `B-TYPE`. With
    `scheme="iob2"` tags are kept, and an `I-TYPE` that does not continue a
    `TYPE` entity is an error (read such a file as `"iob1"` to repair it).
    With `scheme="bioes"` (also called IOBES) `S-TYPE`, a one-word entity,
    becomes `B-TYPE` and `E-TYPE`, an entity's last word, `I-TYPE`.
    `scheme="auto"` takes any of the three: `S-` and `E-` as in BIOES, an
    `I-` that starts an entity as in IOB1, which leaves IOB2 as it is.

    Args:
        path: the file to read (UTF-8).
        scheme: `"iob1"`, `"iob2"`, `"bioes"` or `"auto"`, the scheme of
            the file.
        labels: optional list of allowed tags (in IOB2); any other tag is
            an error.
        num_columns: the columns every word line must have, or None for
            any number from 2 up, the same on every line.
        tag_column: the column of the tags (default: the last).

    Returns:
        `(sentences, tags)`, parallel lists of lists of strings, tags in IOB2.

    Example:
    >>> sentences, tags = read_conll(find_data_file("conll2003/eng.testb"))
    >>> sentences[1], tags[1]
    (['Nadim', 'Ladki'], ['B-PER', 'I-PER'])

    Raises:
        DataFormatError: a line has the wrong number of columns or an
            unknown or misplaced tag (the message names file and line), or
            the file has no sentence.
    """
    if scheme not in CONLL_SCHEMES:
        raise ValueError(f"`scheme` must be one of {CONLL_SCHEMES}, got {scheme!r}.")
    if num_columns is not None and (int(num_columns) != num_columns or num_columns < 2):
        raise ValueError(
            f"`num_columns` must be None or an integer of at least 2, got {num_columns!r}."
        )
    path = Path(path)
    allowed = None if labels is None else set(labels)
    sentences, tags = [], []
    words, sentence_tags = [], []
    expected_columns = num_columns

    def end_sentence():
        if words:
            sentences.append(list(words))
            tags.append(list(sentence_tags))
        words.clear()
        sentence_tags.clear()

    for line_number, line in read_text_lines(path):
        fields = line.split()
        if not fields:
            end_sentence()
            continue
        if fields[0] == DOCUMENT_START:
            end_sentence()
            continue
        if expected_columns is None:
            expected_columns = len(fields)
        if len(fields) != expected_columns or len(fields) < 2:
            shown = max(expected_columns, 2)
            problem = (
                f"expected {shown} space-separated columns (word ... tag), found {len(fields)}"
            )
            raise DataFormatError(path, line_number, problem, line)
        if not -len(fields) <= tag_column < len(fields) or tag_column in (0, -len(fields)):
            raise DataFormatError(path, line_number, f"there is no tag column {tag_column} after the word "
                                  f"(the line has {len(fields)} columns)", line)
        word, tag = fields[0], fields[tag_column]
        if allowed is not None and tag not in allowed and not (scheme in ("bioes", "auto") and tag[:2] in ("S-", "E-")):
            problem = f"unknown tag {tag!r}, expected one of {list(labels)}"
            raise DataFormatError(path, line_number, problem, line)
        prefix, entity_type = _split_tag(tag, bioes=scheme in ("bioes", "auto"))
        if prefix is None:
            kinds = "'O', 'B-TYPE', 'I-TYPE', 'E-TYPE' or 'S-TYPE'" if scheme in ("bioes", "auto") else (
                "'O', 'B-TYPE' or 'I-TYPE'")
            problem = f"tag {tag!r} is not {kinds}"
            raise DataFormatError(path, line_number, problem, line)
        if prefix in ("S", "E"):  # BIOES: a one-word entity starts; an entity's last word continues it
            prefix, tag = ("B", f"B-{entity_type}") if prefix == "S" else ("I", f"I-{entity_type}")
            if prefix == "I" and not _continues(sentence_tags, entity_type):
                problem = f"tag 'E-{entity_type}' ends an entity that did not start"
                raise DataFormatError(path, line_number, problem, line)
        if allowed is not None and tag not in allowed:
            problem = f"unknown tag {tag!r}, expected one of {list(labels)}"
            raise DataFormatError(path, line_number, problem, line)
        if prefix == "I" and not _continues(sentence_tags, entity_type):
            if scheme in ("iob2", "bioes"):
                previous = sentence_tags[-1] if sentence_tags else "the sentence start"
                problem = (
                    f"tag {tag!r} after {previous!r} starts an entity, which IOB2 does not "
                    "allow; read the file with scheme='iob1' to convert it"
                )
                raise DataFormatError(path, line_number, problem, line)
            tag = f"B-{entity_type}"
        words.append(word)
        sentence_tags.append(tag)
    end_sentence()
    if not sentences:
        raise DataFormatError(path, None, "the file has no tagged words")
    return sentences, tags


def _load_conll2003_tfds(split):
    """A CoNLL-2003 split from TensorFlow Datasets, in the structure of the file reader."""
    where = describe(CONLL2003_TFDS_NAME, split)
    examples, info = tfds_examples(CONLL2003_TFDS_NAME, split)
    names = class_names(info, "ner")
    unknown = sorted(set(names) - set(CONLL2003_LABELS))
    if unknown:
        raise DataFormatError(where, None, f"unknown NER tags {unknown}, expected {CONLL2003_LABELS}")
    sentences, tags = [], []
    for number, example in enumerate(examples):
        words, ids = example["tokens"], example["ner"]
        if len(words) != len(ids):
            problem = f"sentence {number} has {len(words)} tokens but {len(ids)} NER tags"
            raise DataFormatError(where, None, problem)
        if not words:
            continue
        sentence_tags = []
        for tag in (names[i] for i in ids):
            # The same IOB1 -> IOB2 repair as the files get; IOB2 tags pass unchanged.
            prefix, entity_type = _split_tag(tag)
            if prefix == "I" and not _continues(sentence_tags, entity_type):
                tag = f"B-{entity_type}"
            sentence_tags.append(tag)
        sentences.append(list(words))
        tags.append(sentence_tags)
    return sentences, tags


def _split_tag(tag, bioes=False):
    """`("B", "PER")` for "B-PER", `("O", None)` for "O", `(None, None)` if malformed; with `bioes`, "S-" and "E-" too."""
    if tag == "O":
        return "O", None
    prefix, dash, entity_type = tag.partition("-")
    if dash and prefix in (("B", "I", "S", "E") if bioes else ("B", "I")) and entity_type:
        return prefix, entity_type
    return None, None


def _continues(previous_tags, entity_type):
    """Whether an `I-` tag of this type continues the entity before it."""
    return bool(previous_tags) and previous_tags[-1] in (f"B-{entity_type}", f"I-{entity_type}")
