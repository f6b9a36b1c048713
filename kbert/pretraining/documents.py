"""Raw text files to documents of sentences, streamed: the pretraining corpus."""

import dataclasses
import glob
import os
import re

from kbert.io.text_files import read_text_lines

# A sentence ends at ., ! or ? (and any closing quotes or brackets after it)
# followed by white space. Abbreviations ("Mr. Darcy") split too: BERT only
# needs sentence-like units to cut segments at, not linguistic sentences.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s)")
_BLANK = re.compile(r"^\s*$")
DOCUMENT_BOUNDARIES = ("file", "blank_line")
_MAX_PARAGRAPH_LINES = 1000
_MAX_PARAGRAPH_CHARACTERS = 1 << 20


@dataclasses.dataclass
class CorpusStats:
    """What one pass over a corpus read, and what it skipped (with reasons)."""

    files: int = 0
    documents: int = 0
    sentences: int = 0
    empty_files: list = dataclasses.field(default_factory=list)
    binary_files: list = dataclasses.field(default_factory=list)

    def skipped_summary(self):
        """One line naming what was skipped, or "" when nothing was."""
        parts = []
        if self.empty_files:
            parts.append(f"{len(self.empty_files)} empty file(s) ({_names(self.empty_files)})")
        if self.binary_files:
            parts.append(f"{len(self.binary_files)} binary file(s) ({_names(self.binary_files)})")
        return "skipped " + ", ".join(parts) if parts else ""


def _names(paths, limit=3):
    shown = ", ".join(str(p) for p in paths[:limit])
    return shown + (", ..." if len(paths) > limit else "")


def corpus_files(patterns):
    """Expands file paths, folders and glob patterns to a sorted list of files.

    Every pattern must match at least one file: a typo fails loudly instead of
    silently training on less text.
    """
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    patterns = [os.fspath(p) for p in patterns]
    if not patterns:
        raise ValueError("No corpus given: pass text file paths or glob patterns.")
    files = []
    for pattern in patterns:
        if os.path.isdir(pattern):
            matches = [p for p in glob.glob(os.path.join(pattern, "**", "*"), recursive=True)]
            matches = [p for p in matches if os.path.isfile(p)]
        else:
            matches = [p for p in glob.glob(os.path.expanduser(pattern), recursive=True)]
            matches = [p for p in matches if os.path.isfile(p)]
        if not matches:
            raise FileNotFoundError(f"The corpus pattern {pattern!r} matches no file.")
        files.extend(sorted(matches))
    return list(dict.fromkeys(files))


def split_sentences(text):
    """Splits a paragraph into sentences at ., ! or ? followed by a space.

    Example:
    >>> split_sentences("It rained. We stayed in! Did you?")
    ['It rained.', 'We stayed in!', 'Did you?']
    """
    ends = [match.end() for match in _SENTENCE_END.finditer(text)]
    parts = (text[start:end].strip() for start, end in zip([0] + ends, ends + [len(text)]))
    return [s for s in parts if s]


def text_lines(patterns, max_lines=None):
    """The non-blank lines of text files, stripped: raw text for general distillation.

    Each line is one text (a paragraph of WikiText, a line of a book); a
    text longer than the model's sequence is cut when it is packed. Binary
    files are skipped, as in `read_documents`.

    Args:
        patterns: file paths, folders or glob patterns (see `corpus_files`).
        max_lines: stop after this many lines; `None` reads everything.

    Raises:
        DataFormatError: a line is not valid UTF-8, or holds a NUL byte
            after the first block (names the file and line).

    Example:
    >>> with open("book.txt", "w") as file:
    ...     _ = file.write("It rained.\\n\\n  We stayed in.  \\n")
    >>> text_lines("book.txt")
    ['It rained.', 'We stayed in.']
    """
    if max_lines is not None and (isinstance(max_lines, bool) or int(max_lines) != max_lines
                                  or max_lines < 1):
        raise ValueError(f"`max_lines` must be a positive integer or None, got {max_lines!r}.")
    lines = []
    for path in corpus_files(patterns):
        if _is_binary(path):
            continue
        for _, line in _read_lines(path):
            line = line.strip()
            if line:
                lines.append(line)
                if max_lines is not None and len(lines) >= max_lines:
                    return lines
    return lines


def read_documents(files, document_boundary="file", stats=None, max_document_sentences=1000):
    """Yields each document of the corpus as a list of sentences, streaming.

    Lines are read one at a time and a document longer than
    `max_document_sentences` is cut into parts, so memory stays flat however
    large a file is. Lines of a paragraph are joined and split into
    sentences again, so both one-sentence-per-line text (BERT's input format)
    and wrapped prose work; a paragraph end also ends a sentence.

    Args:
        files: paths of UTF-8 text files (see `corpus_files`).
        document_boundary: `"file"`: each file is a document (a folder of
            documents, or books); `"blank_line"`: a blank line ends a
            document (BERT's input format: one sentence per line, documents
            separated by blank lines).
        stats: a `CorpusStats` that counts what was read and skipped.
        max_document_sentences: the longest document part.

    Raises:
        DataFormatError: a line is not valid UTF-8, or holds a NUL byte
            after the first block (names the file and line).
    """
    if document_boundary not in DOCUMENT_BOUNDARIES:
        raise ValueError(
            f"`document_boundary` must be one of {DOCUMENT_BOUNDARIES}, got {document_boundary!r}."
        )
    if int(max_document_sentences) < 1:
        raise ValueError(f"`max_document_sentences` must be at least 1, got {max_document_sentences}.")
    stats = stats if stats is not None else CorpusStats()
    for path in files:
        stats.files += 1
        if _is_binary(path):
            stats.binary_files.append(path)
            continue
        documents_before = stats.documents
        for document in _file_documents(path, document_boundary, int(max_document_sentences)):
            stats.documents += 1
            stats.sentences += len(document)
            yield document
        if stats.documents == documents_before:
            stats.empty_files.append(path)


def _file_documents(path, document_boundary, max_sentences):
    document, paragraph, paragraph_size = [], [], 0
    for _, line in _read_lines(path):
        blank = _BLANK.match(line)
        if not blank:
            paragraph.append(line)
            paragraph_size += len(line)
        # A paragraph ends; text without blank lines is cut too, to bound what is held.
        if blank or len(paragraph) >= _MAX_PARAGRAPH_LINES or paragraph_size >= _MAX_PARAGRAPH_CHARACTERS:
            document.extend(_sentences(paragraph))
            paragraph, paragraph_size = [], 0
            while len(document) >= max_sentences:
                yield document[:max_sentences]
                document = document[max_sentences:]
        if blank and document_boundary == "blank_line" and document:
            yield document
            document = []
    document.extend(_sentences(paragraph))
    while len(document) > max_sentences:
        yield document[:max_sentences]
        document = document[max_sentences:]
    if document:
        yield document


def _sentences(lines):
    return split_sentences(" ".join(line.strip() for line in lines))


def _read_lines(path):
    # A line longer than the reader holds (a book without line ends) comes in
    # pieces cut at spaces: the paragraph joins them again.
    return read_text_lines(path, long_lines="split", allow_empty=True)


def _is_binary(path, probe_bytes=8192):
    """A NUL byte in the first block marks a binary file, as `grep` decides."""
    with open(path, "rb") as file:
        return b"\x00" in file.read(probe_bytes)
