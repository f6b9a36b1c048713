import pytest

from kbert.io import text_files
from kbert.io.text_files import DataFormatError, read_text_lines


def lines_of(tmp_path, content, **kwargs):
    path = tmp_path / "f.txt"
    path.write_bytes(content)
    return list(read_text_lines(path, **kwargs))


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_end_and_a_bom(tmp_path, end):
    content = b"\xef\xbb\xbfone" + end + b"two" + end + end + b"four" + end
    assert lines_of(tmp_path, content) == [(1, "one"), (2, "two"), (3, ""), (4, "four")]


def test_a_crlf_split_between_two_reads_is_one_line_end(tmp_path, monkeypatch):
    monkeypatch.setattr(text_files, "_READ_BYTES", 3)
    assert lines_of(tmp_path, b"ab\r\ncd\re\r\n\r\nf") == [(1, "ab"), (2, "cd"), (3, "e"), (4, ""), (5, "f")]


@pytest.mark.parametrize(
    "content, fragment",
    [(b"ok\nbad \xff byte\n", "f.txt, line 2: invalid UTF-8 at byte 4"),
     (b"ok\r\nx\x00y\n", "f.txt, line 2: a NUL byte at byte 1"),
     ("one line in UTF-16\n".encode("utf-16"), "f.txt, line 1: a NUL byte")],
    ids=["invalid-utf8", "nul", "utf16"],
)
def test_what_is_not_utf8_text_is_refused_naming_file_and_line(tmp_path, content, fragment):
    with pytest.raises(DataFormatError, match=fragment) as raised:
        lines_of(tmp_path, content)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("content", [b"", b"\xef\xbb\xbf", b"\n \r\n\t\r"])
def test_a_file_without_text_is_refused_unless_allowed(tmp_path, content):
    with pytest.raises(DataFormatError, match=r"f\.txt: the file has no text"):
        lines_of(tmp_path, content)
    assert all(not line.strip() for _, line in lines_of(tmp_path, content, allow_empty=True))


def test_long_lines_are_refused_or_cut_at_spaces_within_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(text_files, "_READ_BYTES", 4)  # the line spans many reads
    content = "short\n" + "a bb ccc déé " * 3 + "\nend"
    with pytest.raises(DataFormatError, match=r"f\.txt, line 2: the line is longer than 8 bytes"):
        lines_of(tmp_path, content.encode(), max_line_bytes=8)
    lines = lines_of(tmp_path, content.encode(), long_lines="split", max_line_bytes=8)
    assert all(len(line.encode()) <= 8 for _, line in lines)
    assert [line for number, line in lines if number == 2] == ["a bb ", "ccc ", "déé a ", "bb ccc ", "déé a ",
                                                               "bb ccc ", "déé "]
    assert lines[0] == (1, "short") and lines[-1] == (3, "end")
    # Without a space, a piece ends between two characters.
    assert lines_of(tmp_path, "ééééé".encode(), long_lines="split", max_line_bytes=5) == [
        (1, "éé"), (1, "éé"), (1, "é")]


def test_json_nested_too_deep_is_found_before_parsing():
    from kbert.io.text_files import MAX_JSON_DEPTH, json_too_deep

    assert json_too_deep(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is None
    assert json_too_deep("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)) == 1
    # Brackets in strings (escaped quotes included) are text, not nesting.
    text = '{"a": "' + "[" * 500 + '\\" [[[", "b":\n\n' + "{" * 150 + "}" * 150 + "}"
    assert json_too_deep(text) == 3
    assert json_too_deep('{"a": "' + "[" * 500 + '\\" [[["}') is None
    # Tens of MB are scanned in a second, whatever their nesting.
    import time

    start = time.monotonic()
    assert json_too_deep(b"[" * 20_000_000) == 1
    assert json_too_deep(b'{"v": [' + b'"tok", ' * 3_000_000 + b'"end"]}') is None
    assert time.monotonic() - start < 5
