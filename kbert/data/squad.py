"""Reader for SQuAD v1.1 and v2.0 JSON files (extractive question answering)."""

import json
import warnings
from pathlib import Path

from kbert.data.paths import DataFormatError, DataSource, find_data_file
from kbert.data.tfds_source import check_source, describe, tfds_examples
from kbert.io.text_files import MAX_JSON_DEPTH, json_too_deep

SQUAD_DEV_FILE = "squad/dev-v1.1.json"
SQUAD_DEV_SOURCE = DataSource(url="https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json")

# Only SQuAD v1.1 dev is available offline, so kbert's benchmark and tutorial
# split it by article: questions about one article never reach both sides.
SQUAD_TRAIN_ARTICLES = range(0, 38)
SQUAD_EVAL_ARTICLES = range(38, 48)
SQUAD_TFDS_NAME = "squad/v1.1"
# kbert's split names -> TensorFlow Datasets'.
SQUAD_TFDS_SPLITS = {"train": "train", "dev": "validation"}


def squad_article_split():
    """The article indices kbert trains and evaluates on, within SQuAD v1.1 dev.

    Articles 0-37 (8,582 questions) are for fine-tuning, articles 38-47
    (1,988 questions) for evaluation. Splitting by article keeps every
    context on one side.

    Example:
    >>> train_articles, eval_articles = squad_article_split()
    >>> train = load_squad(articles=train_articles)
    >>> len(train), len(load_squad(articles=eval_articles))
    (8582, 1988)
    """
    return SQUAD_TRAIN_ARTICLES, SQUAD_EVAL_ARTICLES


def load_squad(path=None, articles=None, strict=True, source="local", split=None):
    """Loads the questions of a SQuAD v1.1 or v2.0 JSON file, in file order, or of TFDS's SQuAD v1.1.

    Each question becomes a dict:

    - `id`: the question id (unique in the file);
    - `title`: the Wikipedia article's title;
    - `article`: the article's index in the file (0-based);
    - `question`, `context`: the question and the paragraph that answers it;
    - `answers`: a list of `{"text", "answer_start"}` dicts, where
      `answer_start` is a character offset: `context[answer_start:][:len(text)]`
      is `text`. Training questions have one answer, dev questions several
      (one per annotator, repeats included); v2.0 unanswerable questions none;
    - `is_impossible`: True for v2.0 questions without an answer.

    Every answer is checked against its context. A mismatch is an error
    naming the file, the article and the question; with `strict=False` such
    answers are skipped instead, a question left without an answer is
    dropped, and a warning says how many of each.

    With `source="tfds"` the questions come from TensorFlow Datasets'
    `squad/v1.1` (its "train" split, or "validation" for `split="dev"`),
    downloaded on first use, as the same dicts, checked the same way. TFDS
    keeps no article order, so articles are numbered in the order their
    questions first come, and their questions follow each other.

    Args:
        path: the JSON file. Defaults to `squad/dev-v1.1.json` under
            `data_dir()`, the only SQuAD file available offline.
        articles: indices of the articles to read (e.g. `range(0, 38)`, see
            `squad_article_split`); default all. Local files only.
        strict: raise on an answer that does not match its context, rather
            than skip it.
        source: "local" (a JSON file, offline) or "tfds".
        split: with `source="tfds"`, "train" or "dev" (the default).

    Returns:
        A list of question dicts.

    Example:
    >>> records = load_squad()
    >>> len(records), records[0]["title"], records[0]["answers"][0]
    (10570, 'Super_Bowl_50', {'text': 'Denver Broncos', 'answer_start': 177})

    Raises:
        DataFormatError: the file is not SQuAD JSON, or (with `strict`) an
            answer does not match its context.
        ValueError: an article index outside the file; an unknown source or
            split.
    """
    if check_source(source) == "tfds":
        if path is not None or articles is not None:
            raise ValueError("`path` and `articles` select from a local file; source='tfds' takes a `split`.")
        return _load_squad_tfds("dev" if split is None else split, strict)
    if split is not None:
        raise ValueError(
            "`split` selects a TFDS split (source='tfds'); the local source reads `path` "
            f"(default {SQUAD_DEV_FILE}, SQuAD v1.1 dev)."
        )
    if path is None:
        path = find_data_file(SQUAD_DEV_FILE, SQUAD_DEV_SOURCE)
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFormatError(path, line, f"invalid UTF-8 at byte {error.start} ({error.reason})") from None
    line = json_too_deep(raw)
    if line is not None:
        raise DataFormatError(path, line, f"JSON nested deeper than {MAX_JSON_DEPTH} levels; refused before parsing it")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataFormatError(path, error.lineno, f"not valid JSON: {error.msg} (column {error.colno})") from None
    reader = _SquadReader(path, text, strict)
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise DataFormatError(path, 1, 'expected a JSON object with a "data" list of articles, as SQuAD has')

    if articles is None:
        selected = range(len(data))
    else:
        selected = [int(a) for a in articles]
        outside = [a for a in selected if not 0 <= a < len(data)]
        if outside:
            raise ValueError(
                f"Article indices {outside[:5]} are outside {path}, which has {len(data)} "
                f"articles (0 to {len(data) - 1})."
            )
    records = []
    for index in selected:
        records.extend(reader.read_article(index, data[index]))
    reader.report()
    if not records and articles is None:
        raise DataFormatError(path, None, "the file has no questions")
    return records


def _load_squad_tfds(split, strict):
    """SQuAD v1.1 questions from TensorFlow Datasets, checked and shaped like a JSON file's."""
    if split not in SQUAD_TFDS_SPLITS:
        raise ValueError(f"Unknown SQuAD split {split!r}. Choose one of: {', '.join(SQUAD_TFDS_SPLITS)}.")
    tfds_split = SQUAD_TFDS_SPLITS[split]
    examples, _ = tfds_examples(SQUAD_TFDS_NAME, tfds_split)
    # Regroup the flat examples as the JSON's articles and paragraphs, so that
    # the file reader's checks (ids, answers against contexts) apply unchanged.
    where = describe(SQUAD_TFDS_NAME, tfds_split)
    articles = {}
    for example in examples:
        paragraphs = articles.setdefault(example["title"], {})
        answers = example["answers"]
        if len(answers["text"]) != len(answers["answer_start"]):
            raise DataFormatError(
                where, None, f"question {example['id']!r} has {len(answers['text'])} answer texts "
                f"but {len(answers['answer_start'])} answer starts"
            )
        paragraphs.setdefault(example["context"], []).append({
            "id": example["id"],
            "question": example["question"],
            "answers": [
                {"text": text, "answer_start": start}
                for text, start in zip(answers["text"], answers["answer_start"])
            ],
        })
    reader = _SquadReader(where, None, strict)
    records = []
    for index, (title, paragraphs) in enumerate(articles.items()):
        article = {"title": title, "paragraphs": [
            {"context": context, "qas": questions} for context, questions in paragraphs.items()
        ]}
        records.extend(reader.read_article(index, article))
    reader.report()
    return records


class _SquadReader:
    """Checks and converts articles, keeping the counts of what it skipped."""

    def __init__(self, path, text, strict):
        self.path = path
        self.text = text
        self.strict = strict
        self.seen_ids = {}
        self.skipped_answers = 0
        self.dropped_questions = 0
        self.first_skipped = None

    def fail(self, problem, needle=None):
        raise DataFormatError(self.path, self._line_of(needle), problem)

    def _line_of(self, needle):
        """The line of the file where `needle` (a JSON value) first appears, else 1; None without a file."""
        if self.text is None:
            return None
        position = self.text.find(json.dumps(needle, ensure_ascii=False)) if needle is not None else -1
        if position < 0 and needle is not None:
            position = self.text.find(json.dumps(needle))
        return self.text.count("\n", 0, position) + 1 if position >= 0 else 1

    def field(self, mapping, key, kind, where, needle=None):
        value = mapping.get(key) if isinstance(mapping, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            self.fail(f"{where}: expected {key!r} of type {expected}, found {value!r:.80}", needle)
        return value

    def read_article(self, index, article):
        title = article.get("title", "") if isinstance(article, dict) else ""
        where = f"article {index} ({title!r})"
        paragraphs = self.field(article, "paragraphs", list, where, title or None)
        records = []
        for paragraph_index, paragraph in enumerate(paragraphs):
            paragraph_where = f"{where}, paragraph {paragraph_index}"
            context = self.field(paragraph, "context", str, paragraph_where, title or None)
            for qa in self.field(paragraph, "qas", list, paragraph_where, title or None):
                record = self.read_question(qa, index, title, context, paragraph_where)
                if record is not None:
                    records.append(record)
        return records

    def read_question(self, qa, article_index, title, context, where):
        question_id = self.field(qa, "id", (str, int), where, title or None)
        question_id = str(question_id)
        where = f"article {article_index} ({title!r}), question {question_id!r}"
        if question_id in self.seen_ids:
            self.fail(f"{where}: the id repeats that of {self.seen_ids[question_id]}", question_id)
        self.seen_ids[question_id] = f"article {article_index}"
        question = self.field(qa, "question", str, where, question_id)
        is_impossible = qa.get("is_impossible", False)
        if not isinstance(is_impossible, bool):
            self.fail(f"{where}: 'is_impossible' must be true or false, found {is_impossible!r}", question_id)
        answers = []
        for answer in self.field(qa, "answers", list, where, question_id):
            text = self.field(answer, "text", str, f"{where}, an answer", question_id)
            start = self.field(answer, "answer_start", int, f"{where}, answer {text!r:.40}", question_id)
            found = context[start : start + len(text)] if start >= 0 else None
            if found != text or not text:
                problem = (
                    f"{where}: answer {text!r:.60} at character {start} does not match the "
                    f"context there ({found!r:.60})"
                )
                if self.strict:
                    self.fail(problem + "; pass strict=False to skip such answers", question_id)
                self.skipped_answers += 1
                self.first_skipped = self.first_skipped or problem
                continue
            answers.append({"text": text, "answer_start": start})
        if is_impossible and answers:
            self.fail(f"{where}: marked 'is_impossible' but has answers", question_id)
        if not is_impossible and not answers:
            if self.strict or not qa["answers"]:
                self.fail(f"{where}: no answers, and not marked 'is_impossible'", question_id)
            self.dropped_questions += 1
            return None
        return {
            "id": question_id,
            "title": title,
            "article": article_index,
            "question": question,
            "context": context,
            "answers": answers,
            "is_impossible": is_impossible,
        }

    def report(self):
        if self.skipped_answers:
            warnings.warn(
                f"{self.path}: skipped {self.skipped_answers} answers that do not match their "
                f"context and dropped {self.dropped_questions} questions left without an "
                f"answer (strict=False). The first: {self.first_skipped}",
                stacklevel=3,
            )
