"""`read_labelled_file`: CSV, TSV and JSON Lines as users have them, every row kept, errors with file and line."""

import json

import pytest

from kbert.data import DataFormatError, LabelledExamples, read_labelled_file
from kbert.data.labelled_file import class_names_of, label_ids


def write(path, text):
    path.write_bytes(text.encode("utf-8"))
    return str(path)


def test_a_quoted_csv_keeps_commas_quotes_and_line_breaks(tmp_path):
    path = write(tmp_path / "comments.csv",
                 'comment_id,text,label\r\n'
                 '7,"Free prize, call now!",spam\r\n'
                 '8,"She said ""see you""\r\nat 5",ham\r\n'
                 '9,plain text,ham\r\n')
    examples = read_labelled_file(path, id_column="comment_id")
    assert examples.texts == ["Free prize, call now!", 'She said "see you"\nat 5', "plain text"]
    assert examples.labels == ["spam", "ham", "ham"] and examples.ids == ["7", "8", "9"]
    assert examples.line_numbers == [2, 3, 5]  # the record that spans two lines starts on line 3
    x, y = examples
    assert x == examples.texts and y == examples.labels and len(examples) == 3


def test_a_csv_quote_that_is_never_closed_is_named_with_its_line(tmp_path):
    path = write(tmp_path / "bad.csv", 'text,label\nfine,a\n"never closed,b\nmore,a\n' + "x,a\n" * 5)
    with pytest.raises(DataFormatError, match=r"bad\.csv, line 3: a quoted field is never closed"):
        read_labelled_file(path)


def test_a_csv_row_with_another_number_of_fields_is_named_with_its_line(tmp_path):
    path = write(tmp_path / "ragged.csv", "text,label\nfine,a\nan unquoted, comma,b\n")
    with pytest.raises(DataFormatError, match=r"ragged\.csv, line 3: the row has 3 fields where the header has 2"):
        read_labelled_file(path)


def test_a_headerless_tsv_with_stray_quotes_loses_no_row(tmp_path):
    # Python's csv module, quoting on, joins such rows: a TSV is read without quote processing.
    rows = [f'review {i} said "great{"" if i % 3 else " and more"}\t{i % 2}' for i in range(1000)]
    path = write(tmp_path / "reviews.tsv", "\n".join(rows) + "\n")
    examples = read_labelled_file(path)
    assert len(examples) == 1000 and examples.columns == {"text": "text", "label": "label"}
    assert examples.texts[0] == 'review 0 said "great and more' and examples.labels[:2] == ["0", "1"]


def test_a_glue_style_tsv_with_a_header_reads_pairs(tmp_path):
    path = write(tmp_path / "dev.tsv", 'index\tsentence1\tsentence2\tlabel\n0\tA "quote\tB\tentailment\n'
                                        '1\tC\tD\tnot_entailment\n')
    examples = read_labelled_file(path)
    assert examples.x == (['A "quote', "C"], ["B", "D"])
    assert examples.ids == ["0", "1"] and examples.labels == ["entailment", "not_entailment"]


def test_json_lines_with_pairs_numbers_and_a_bad_line(tmp_path):
    records = [{"premise": "a", "hypothesis": "b", "label": 1, "id": 10}, {"premise": "c", "hypothesis": "d",
                                                                             "label": 0, "id": 11}]
    path = write(tmp_path / "nli.jsonl", "\n".join(json.dumps(record) for record in records) + "\n\n")
    examples = read_labelled_file(path)
    assert examples.x == (["a", "c"], ["b", "d"]) and examples.labels == [1, 0] and examples.ids == ["10", "11"]
    broken = write(tmp_path / "broken.jsonl", json.dumps(records[0]) + '\n{"premise": "x", \n')
    with pytest.raises(DataFormatError, match=r"broken\.jsonl, line 2: the line is not JSON"):
        read_labelled_file(broken)
    missing = write(tmp_path / "missing.jsonl", json.dumps(records[0]) + '\n{"premise": "x", "label": 1}\n')
    with pytest.raises(DataFormatError, match=r"missing\.jsonl, line 2: the record has no 'hypothesis'"):
        read_labelled_file(missing)


def test_columns_that_cannot_be_guessed_are_listed(tmp_path):
    path = write(tmp_path / "odd.csv", "body,verdict\nhello,yes\n")
    with pytest.raises(DataFormatError, match=r"no column is the label by its name; the columns are "
                                              r"\['body', 'verdict'\]: name it with `label_column`"):
        read_labelled_file(path, text_column="body")
    examples = read_labelled_file(path, text_column="body", label_column="verdict")
    assert (examples.texts, examples.labels) == (["hello"], ["yes"])
    with pytest.raises(DataFormatError, match=r"there is no column 'Body'"):
        read_labelled_file(path, text_column="Body", label_column="verdict")


def test_an_empty_label_and_an_unknown_format_are_refused(tmp_path):
    path = write(tmp_path / "empty.csv", "text,label\nfine,a\nno label,\n")
    with pytest.raises(DataFormatError, match=r"empty\.csv, line 3: the label \('label'\) is empty"):
        read_labelled_file(path)
    with pytest.raises(ValueError, match=r"cannot tell the format from the extension '\.xlsx'"):
        read_labelled_file(str(tmp_path / "data.xlsx"))


def test_class_names_are_ordered_by_value_or_name_and_unknown_labels_named_with_their_line(tmp_path):
    assert class_names_of(["b", "a", "b"]) == ["a", "b"]
    assert class_names_of(["10", "9", "1"]) == ["1", "9", "10"]
    assert class_names_of([2, 0, 1]) == ["0", "1", "2"]
    path = write(tmp_path / "dev.csv", "text,label\nx,a\ny,c\n")
    with pytest.raises(DataFormatError, match=r"dev\.csv, line 3: the label 'c' is not one of the classes "
                                              r"that training saw, \['a', 'b'\]"):
        label_ids(read_labelled_file(path), ["a", "b"])


def test_subset_keeps_every_field_in_step(tmp_path):
    path = write(tmp_path / "three.csv", "id,text,label\n1,x,a\n2,y,b\n3,z,a\n")
    part = read_labelled_file(path).subset([2, 0])
    assert isinstance(part, LabelledExamples)
    assert (part.texts, part.labels, part.ids, part.line_numbers) == (["z", "x"], ["a", "a"], ["3", "1"], [4, 2])
