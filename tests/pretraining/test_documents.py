import os

import pytest

from kbert.data import DataFormatError
from kbert.pretraining.documents import CorpusStats, corpus_files, read_documents, split_sentences, text_lines


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def read(files, **kwargs):
    stats = CorpusStats()
    documents = list(read_documents([str(f) for f in files], stats=stats, **kwargs))
    return documents, stats


# split_sentences


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("It rained. We stayed in! Did you?", ["It rained.", "We stayed in!", "Did you?"]),
        # Closing quotes and brackets stay with the sentence they close.
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("She asked 'why?' and left. Fine", ["She asked 'why?'", "and left.", "Fine"]),
        ("(It was late.) We slept.", ["(It was late.)", "We slept."]),
        ("“Run!” he cried.", ["“Run!”", "he cried."]),
        # Several end marks end one sentence.
        ("Really?! Yes... Sure.", ["Really?!", "Yes...", "Sure."]),
        # No split without white space after the mark.
        ("Pi is about 3.14 and e.g. 2.71 too.", ["Pi is about 3.14 and e.g.", "2.71 too."]),
        ("Version 3.5 is out", ["Version 3.5 is out"]),
        ("  Spaced.   Out!  ", ["Spaced.", "Out!"]),
        ("no end mark", ["no end mark"]),
        ("", []),
        ("   ", []),
    ],
)
def test_split_sentences(text, sentences):
    assert split_sentences(text) == sentences


def test_split_sentences_keeps_every_character_but_the_separating_spaces():
    text = 'A "b." C? (d!) e 3.5. f'
    assert " ".join(split_sentences(text)) == text


# corpus_files


def test_corpus_files_expands_folders_recursively_and_sorts(tmp_path):
    b = write(tmp_path / "corpus" / "b.txt", "b.")
    a = write(tmp_path / "corpus" / "a.txt", "a.")
    nested = write(tmp_path / "corpus" / "sub" / "c.txt", "c.")
    assert corpus_files(tmp_path / "corpus") == sorted(map(str, [a, b, nested]))


def test_corpus_files_globs_dedups_and_keeps_pattern_order(tmp_path):
    a = write(tmp_path / "a.txt", "a.")
    b = write(tmp_path / "b.md", "b.")
    files = corpus_files([str(tmp_path / "*.md"), str(tmp_path / "*.txt"), str(a)])
    assert files == [str(b), str(a)]


def test_corpus_file_pattern_matching_nothing_raises_naming_it(tmp_path):
    write(tmp_path / "a.txt", "a.")
    pattern = str(tmp_path / "*.tx")
    with pytest.raises(FileNotFoundError, match=r"\*\.tx'"):
        corpus_files([str(tmp_path / "a.txt"), pattern])
    with pytest.raises(FileNotFoundError, match="missing"):
        corpus_files(tmp_path / "missing")
    # An empty folder matches no file either.
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        corpus_files(tmp_path / "empty")


def test_corpus_files_needs_a_pattern():
    with pytest.raises(ValueError, match="No corpus"):
        corpus_files([])


# read_documents


def test_file_boundary_makes_each_file_one_document(tmp_path):
    one = write(tmp_path / "1.txt", "First one. Second one.\n\nThird one.\n")
    two = write(tmp_path / "2.txt", "Other file.\n")
    documents, stats = read([one, two])
    assert documents == [["First one.", "Second one.", "Third one."], ["Other file."]]
    assert (stats.files, stats.documents, stats.sentences) == (2, 2, 4)


def test_blank_line_boundary_ends_documents_at_blank_lines(tmp_path):
    # BERT's format: one sentence per line, blank lines between documents;
    # several blank lines (or white space only) are one boundary.
    text = "Doc one a.\nDoc one b.\n\n\n  \t\nDoc two a.\nDoc two b.\n\nDoc three.\n"
    documents, stats = read([write(tmp_path / "c.txt", text)], document_boundary="blank_line")
    assert documents == [["Doc one a.", "Doc one b."], ["Doc two a.", "Doc two b."], ["Doc three."]]
    assert (stats.files, stats.documents, stats.sentences) == (1, 3, 5)


def test_blank_line_documents_never_span_files(tmp_path):
    one = write(tmp_path / "1.txt", "End of file one.")  # no final newline
    two = write(tmp_path / "2.txt", "Start of file two.\n")
    documents, _ = read([one, two], document_boundary="blank_line")
    assert documents == [["End of file one."], ["Start of file two."]]


def test_wrapped_lines_of_a_paragraph_are_joined(tmp_path):
    text = "The cat sat\non the mat. The dog\n   barked at\nit!\n\nNext paragraph\nhere.\n"
    documents, _ = read([write(tmp_path / "w.txt", text)])
    assert documents == [
        ["The cat sat on the mat.", "The dog barked at it!", "Next paragraph here."]
    ]


def test_paragraph_end_ends_a_sentence(tmp_path):
    text = "A heading without a period\n\nThe text starts here\n\nand goes on.\n"
    documents, _ = read([write(tmp_path / "h.txt", text)])
    assert documents == [["A heading without a period", "The text starts here", "and goes on."]]


def test_byte_order_mark_is_stripped(tmp_path):
    path = write(tmp_path / "bom.txt", "\ufeffHello there. Bye.\n")
    documents, _ = read([path])
    assert documents == [["Hello there.", "Bye."]]
    # A BOM on its own line is a blank line, not a sentence.
    path = write(tmp_path / "bom2.txt", "\ufeff\nHello.\n")
    assert read([path], document_boundary="blank_line")[0] == [["Hello."]]


def test_crlf_line_ends(tmp_path):
    path = write(tmp_path / "dos.txt", "One.\r\nTwo.\r\n\r\nThree.\r\n")
    assert read([path], document_boundary="blank_line")[0] == [["One.", "Two."], ["Three."]]


@pytest.mark.parametrize("document_boundary", ["file", "blank_line"])
def test_max_document_sentences_cuts_long_documents(tmp_path, document_boundary):
    # One paragraph of 10 sentences, then one of 2: parts of at most 3, in order.
    sentences = [f"Sentence {i}." for i in range(12)]
    text = " ".join(sentences[:10]) + "\n\n" + "\n".join(sentences[10:]) + "\n"
    documents, stats = read(
        [write(tmp_path / "long.txt", text)],
        document_boundary=document_boundary,
        max_document_sentences=3,
    )
    assert all(1 <= len(d) <= 3 for d in documents), [len(d) for d in documents]
    assert [s for d in documents for s in d] == sentences
    assert stats.documents == len(documents)
    if document_boundary == "blank_line":
        # The second paragraph is its own document.
        assert documents[-1] == sentences[10:]


def test_max_document_sentences_bounds_text_without_blank_lines(tmp_path):
    text = "".join(f"Line {i}.\n" for i in range(2500))
    documents, _ = read([write(tmp_path / "flat.txt", text)], max_document_sentences=1000)
    assert [len(d) for d in documents] == [1000, 1000, 500]
    assert documents[2][-1] == "Line 2499."


def test_documents_are_streamed(tmp_path):
    files = [write(tmp_path / f"{i}.txt", f"Doc {i}.\n") for i in range(3)]
    files.insert(1, tmp_path / "does-not-exist.txt")
    documents = read_documents([str(f) for f in files])
    # The first document comes before the missing file is opened.
    assert next(documents) == ["Doc 0."]
    with pytest.raises(FileNotFoundError):
        next(documents)


def test_empty_and_binary_files_are_skipped_and_listed(tmp_path):
    good = write(tmp_path / "a_good.txt", "Some text. More text.\n")
    empty = write(tmp_path / "b_empty.txt", "")
    blank = write(tmp_path / "c_blank.txt", "\n   \n\t\n")
    binary = write(tmp_path / "d_binary.bin", b"PK\x03\x04\x00\x00\xff\xfe binary")
    also_good = write(tmp_path / "e_good.txt", "Last file.\n")
    files = [str(p) for p in (good, empty, blank, binary, also_good)]
    documents, stats = read(files)
    assert documents == [["Some text.", "More text."], ["Last file."]]
    assert stats.files == 5 and stats.documents == 2 and stats.sentences == 3
    assert stats.empty_files == [str(empty), str(blank)]
    assert stats.binary_files == [str(binary)]
    summary = stats.skipped_summary()
    assert "2 empty file(s)" in summary and "b_empty.txt" in summary
    assert "1 binary file(s)" in summary and "d_binary.bin" in summary


def test_nothing_skipped_gives_an_empty_summary(tmp_path):
    _, stats = read([write(tmp_path / "a.txt", "Text.\n")])
    assert stats.skipped_summary() == ""
    assert stats.empty_files == [] and stats.binary_files == []


def test_skipped_summary_shortens_long_lists():
    stats = CorpusStats(empty_files=[f"f{i}.txt" for i in range(5)])
    summary = stats.skipped_summary()
    assert "5 empty file(s)" in summary
    assert "f2.txt" in summary and "f3.txt" not in summary and "..." in summary


def test_non_utf8_raises_naming_file_and_line(tmp_path):
    text = "Fine line.\nAlso fine.\n".encode() + "Café au lait.\n".encode("latin-1")
    path = write(tmp_path / "latin1.txt", text)
    with pytest.raises(DataFormatError) as error:
        read([path])
    assert error.value.line_number == 3
    assert error.value.path.name == "latin1.txt"
    message = str(error.value)
    assert str(path) in message and "line 3" in message and "UTF-8" in message


def test_non_utf8_error_comes_after_the_documents_before_it(tmp_path):
    good = write(tmp_path / "a.txt", "Good.\n")
    bad = write(tmp_path / "b.txt", b"ok\n\n\x80\x81\n")
    documents = read_documents([str(good), str(bad)], document_boundary="blank_line")
    assert next(documents) == ["Good."]
    assert next(documents) == ["ok"]
    with pytest.raises(DataFormatError, match=r"b\.txt, line 3"):
        next(documents)


def test_stats_count_each_pass_and_default_stats_work(tmp_path):
    path = write(tmp_path / "a.txt", "One. Two.\n")
    stats = CorpusStats()
    list(read_documents([str(path)], stats=stats))
    list(read_documents([str(path)], stats=stats))
    assert (stats.files, stats.documents, stats.sentences) == (2, 2, 4)
    assert list(read_documents([str(path)])) == [["One.", "Two."]]


def test_bad_arguments(tmp_path):
    path = str(write(tmp_path / "a.txt", "One.\n"))
    with pytest.raises(ValueError, match="document_boundary"):
        list(read_documents([path], document_boundary="paragraph"))
    with pytest.raises(ValueError, match="max_document_sentences"):
        list(read_documents([path], max_document_sentences=0))


def test_paths_may_be_path_objects(tmp_path):
    path = write(tmp_path / "a.txt", "One.\n")
    assert list(read_documents([path])) == [["One."]]
    assert corpus_files(path) == [os.fspath(path)]


def test_text_lines_are_the_non_blank_lines_stripped_in_file_order(tmp_path):
    write(tmp_path / "corpus" / "a.txt", " = Title = \n\nFirst line.\n   \n\tSecond line. \n")
    write(tmp_path / "corpus" / "b.txt", "\ufeffThird line.\nFourth")
    write(tmp_path / "corpus" / "c.bin", b"\x00\x01binary")
    lines = text_lines(tmp_path / "corpus")
    assert lines == ["= Title =", "First line.", "Second line.", "Third line.", "Fourth"]
    assert text_lines(str(tmp_path / "corpus" / "*.txt"), max_lines=2) == ["= Title =", "First line."]
    with pytest.raises(ValueError, match="`max_lines` must be a positive integer or None, got 0"):
        text_lines(tmp_path / "corpus", max_lines=0)


def test_text_lines_name_the_file_and_line_of_bad_text(tmp_path):
    write(tmp_path / "bad.txt", b"fine\n\nstill fine\n\xff\xfe broken\n")
    with pytest.raises(DataFormatError, match=r"bad\.txt, line 4"):
        text_lines(tmp_path / "bad.txt")
