"""The one reader of the text files kbert takes: corpora, vocabularies, labelled data.

Every text file kbert reads goes through `read_text_lines`, so all of them
agree on what a line is and on what is refused:

- a line ends at LF, CRLF or CR (old Mac files), and a final line end does
  not make an extra empty line;
- a leading UTF-8 byte-order mark is removed;
- invalid UTF-8 and NUL bytes are errors naming the file and the line;
- a file with no text (empty, or blank lines only) is an error naming it,
  unless the caller takes empty files (a corpus skips and lists them);
- the file is streamed: memory is bounded by `max_line_bytes`, whatever the
  file's size and however long its lines.

`json_too_deep` finds JSON nested deeper than `MAX_JSON_DEPTH`, before
`json.loads` (and the code that walks what it returns) recurses that deep:
every JSON file kbert parses (configs, `.keras` members, SQuAD files) is
checked with it.

This module imports nothing of kbert's, so that `kbert.preprocessing` and
`kbert.data` can both use it.
"""

import os
import re
from pathlib import Path

from kbert.io.setting_error import said_as_flags

# The longest line a reader holds; a longer line is refused or cut (`long_lines`).
MAX_LINE_BYTES = 1 << 20
_READ_BYTES = 1 << 20
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
_LONG_LINES = ("refuse", "split")
# The deepest nesting of JSON arrays and objects kbert parses. A kbert model's
# config.json nests about 10 deep, a distiller's about 20; Python's recursion
# limit (1,000) is near enough that a file nested a few hundred deep makes
# `json.loads`, or the code walking its result, fail with a RecursionError.
MAX_JSON_DEPTH = 100
# A JSON string, its escapes included: its brackets are no nesting.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_CHUNK = 1 << 20


class DataFormatError(ValueError):
    """A data file does not have the expected format.

    The message names the file, the 1-based line number and the line itself,
    so the problem can be found with an editor. A problem of the whole file
    (it is empty) or of data that comes from no file (a TensorFlow Datasets
    split) has `line_number` None, and the file or source is named as is.
    `names` are the settings the problem names in backticks, which the
    `kbert` command says as its flags (`kbert.io.setting_error`).
    """

    def __init__(self, path, line_number, problem, line=None, names=()):
        self.path = Path(path) if line_number is not None else path
        self.line_number = line_number
        self.names = names
        where = self.path if line_number is None else f"{self.path}, line {line_number}"
        message = f"{where}: {problem}"
        if line is not None:
            message += f": {_shorten(line)}"
        super().__init__(message)

    def said_as_flags(self):
        """The message with each setting of `names` said as the command's flag."""
        return said_as_flags(str(self), self.names)


def read_text_lines(path, long_lines="refuse", allow_empty=False, max_line_bytes=MAX_LINE_BYTES):
    """Yields `(line_number, line)` for each line of a UTF-8 text file, streaming.

    Lines end at LF, CRLF or CR; line ends and a leading byte-order mark are
    removed, and a final line end does not count as an extra empty line.

    Args:
        path: the file (a local path, or a URL that `tf.io.gfile` opens, such
            as `gs://...`).
        long_lines: what to do with a line longer than `max_line_bytes`:
            `"refuse"` (a record that must stay whole: a vocabulary token, a
            labelled row) raises; `"split"` (running text: corpora,
            vocabulary learning) yields it in pieces of at most
            `max_line_bytes`, cut after a space or tab where there is one
            (else between two characters), all with the line's number.
        allow_empty: yield nothing for a file without text, instead of
            raising.
        max_line_bytes: the longest line (or piece) held in memory.

    Raises:
        DataFormatError: a line is not valid UTF-8, holds a NUL byte, or is
            too long; or the file has no text. The message names the file
            and the line.

    Example:
    >>> with open("mac.txt", "wb") as file:
    ...     _ = file.write(b"\\xef\\xbb\\xbfone\\rtwo\\r\\nthree\\n")
    >>> list(read_text_lines("mac.txt"))
    [(1, 'one'), (2, 'two'), (3, 'three')]
    """
    if long_lines not in _LONG_LINES:
        raise ValueError(f"`long_lines` must be one of {_LONG_LINES}, got {long_lines!r}.")
    if int(max_line_bytes) < 4:  # room for any one UTF-8 character
        raise ValueError(f"`max_line_bytes` must be at least 4, got {max_line_bytes!r}.")
    has_text = False
    with _open_binary(path) as file:
        for line_number, offset, raw in _raw_lines(file, path, long_lines, int(max_line_bytes)):
            line = _decode(path, line_number, offset, raw)
            has_text = has_text or not line.isspace() and line != ""
            yield line_number, line
    if not has_text and not allow_empty:
        raise DataFormatError(os.fspath(path), None, "the file has no text (it is empty or blank)")


def _open_binary(path):
    path = os.fspath(path)
    if "://" in path and not os.path.exists(path):  # a remote file system: TensorFlow's, loaded only here
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _raw_lines(file, path, long_lines, limit):
    """`(line_number, byte offset in the line, bytes)` of each line or piece, without line ends."""
    line_number, offset, pending = 1, 0, b""
    first = True
    while chunk := file.read(_READ_BYTES):
        if first:
            chunk, first = chunk.removeprefix(_BOM), False
        data, start = pending + chunk, 0
        for match in _LINE_END.finditer(data):
            if match.end() == len(data) and data.endswith(b"\r"):
                break  # a CR that ends what was read may be the first half of a CRLF
            yield from _pieces(path, line_number, offset, data[start:match.start()], long_lines, limit,
                               whole=True)
            line_number, offset, start = line_number + 1, 0, match.end()
        pending = data[start:]
        # Only the part of a long line that is still needed stays in memory.
        for piece in _pieces(path, line_number, offset, pending, long_lines, limit, whole=False):
            yield piece
            offset += len(piece[2])
            pending = pending[len(piece[2]):]
    if pending:
        yield from _pieces(path, line_number, offset, pending.removesuffix(b"\r"), long_lines, limit,
                           whole=True)


def _pieces(path, line_number, offset, raw, long_lines, limit, whole):
    """The pieces of a line's bytes; with `whole` False, the last piece (still growing) is kept back."""
    while len(raw) > limit:
        if long_lines == "refuse":
            problem = f"the line is longer than {limit:,} bytes, the most kbert reads as one line"
            raise DataFormatError(path, line_number, problem, raw[:limit].decode("utf-8", "replace"))
        cut = _cut(raw, limit)
        yield line_number, offset, raw[:cut]
        offset, raw = offset + cut, raw[cut:]
    if whole:
        yield line_number, offset, raw


def _cut(raw, limit):
    """Where to cut a long line: after the last space or tab, else between two characters."""
    space = max(raw.rfind(b" ", 0, limit), raw.rfind(b"\t", 0, limit))
    if space > 0:
        return space + 1
    cut = limit
    while cut > 0 and raw[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte
        cut -= 1
    return cut or limit


def _decode(path, line_number, offset, raw):
    nul = raw.find(b"\x00")
    if nul >= 0:
        problem = (f"a NUL byte at byte {offset + nul} of the line: this is not UTF-8 text "
                   "(a binary file, or UTF-16: convert it to UTF-8, e.g. with iconv)")
        raise DataFormatError(path, line_number, problem, raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        problem = (f"invalid UTF-8 at byte {offset + error.start} of the line ({error.reason}); "
                   "convert the file to UTF-8, e.g. with iconv")
        raise DataFormatError(path, line_number, problem, raw) from None


def _shorten(line, limit=80):
    shown = repr(line[:limit])
    return shown + "..." if len(line) > limit else shown


def json_too_deep(data, limit=MAX_JSON_DEPTH):
    """The 1-based line at which JSON text nests deeper than `limit` arrays and objects, or None.

    Strings are skipped (their brackets are text); nothing is parsed, so the
    check costs one pass over the text whatever its nesting, and `json.loads`
    runs only on text it cannot recurse too deep into.

    Args:
        data: the JSON text, `bytes` or `str`.
        limit: the deepest nesting allowed.

    Example:
    >>> json_too_deep('{"a": [[1], "[[[[["]}', limit=3) is None
    True
    >>> json_too_deep('{"a":\\n [[[1]]]}', limit=3)
    2
    """
    import numpy as np

    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= limit:
        return None  # the common case: too few brackets to nest that deep
    stripped = _JSON_STRING.sub(b"", data)
    depth = 0
    for start in range(0, len(stripped), _JSON_CHUNK):
        codes = np.frombuffer(stripped, np.uint8, count=min(_JSON_CHUNK, len(stripped) - start), offset=start)
        steps = (np.isin(codes, (ord("["), ord("{"))).astype(np.int32)
                 - np.isin(codes, (ord("]"), ord("}"))).astype(np.int32))
        depths = depth + np.cumsum(steps, dtype=np.int64)
        deeper = np.flatnonzero(depths > limit)
        if deeper.size:
            return stripped[: start + int(deeper[0])].count(b"\n") + 1
        depth = int(depths[-1]) if depths.size else depth
    return None
