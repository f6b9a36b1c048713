import pytest

from kbert.data import GLUE_TASKS, DataFormatError, load_glue, paths


@pytest.fixture
def real_data():
    """The real data sets, where the user keeps them: KBERT_DATA or ../shared/data."""


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    requested = []

    def no_network(url, out_file):
        requested.append(url)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(paths, "fetch_url", no_network)
    return tmp_path, requested


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def count(texts, task):
    return len(texts[0]) if GLUE_TASKS[task].is_pair else len(texts)


@pytest.mark.parametrize(
    "task, split, rows, positives",
    [
        ("sst2", "train", 67349, 37569),
        ("sst2", "dev", 872, 444),
        ("sst2", "test", 1821, None),
        ("rte", "train", 2490, 1241),
        ("rte", "dev", 277, 131),
        ("rte", "test", 3000, None),
        ("mrpc", "train", 3668, 2474),
        ("mrpc", "dev", 408, 279),
        ("mrpc", "test", 1725, None),
    ],
)
def test_real_files_counts(real_data, task, split, rows, positives):
    texts, labels = load_glue(task, split)
    assert count(texts, task) == rows
    if GLUE_TASKS[task].is_pair:
        assert len(texts) == 2 and len(texts[1]) == rows
    if positives is None:
        assert labels is None
    else:
        assert len(labels) == rows and sum(labels) == positives
        assert set(labels) == {0, 1}


def test_sst2_rows_are_stripped(real_data):
    texts, labels = load_glue("SST-2", "dev")
    assert texts[0] == "it 's a charming and often affecting journey ."
    assert labels[0] == 1
    assert texts[1] == "unflinchingly bleak and desperate" and labels[1] == 0
    test_texts, _ = load_glue("sst2", "test")
    assert test_texts[0] == "uneasy mishmash of styles and genres ."


def test_rte_labels_follow_glue_convention(real_data):
    (premises, hypotheses), labels = load_glue("RTE", "dev")
    assert premises[0].startswith("Dana Reeve, the widow of the actor Christopher Reeve")
    assert hypotheses[0] == "Christopher Reeve had an accident."
    assert GLUE_TASKS["rte"].label_names[labels[0]] == "not_entailment"
    assert labels[0] == 1


def test_mrpc_keeps_quotes_and_reads_past_bom(real_data):
    (first, second), labels = load_glue("mrpc", "dev")
    assert first[0].startswith("He said the foodservice pie business")
    assert second[0].startswith('" The foodservice pie business does not fit')
    assert labels[:2] == [1, 0]
    (first, _), labels = load_glue("Mrpc", "test")
    assert first[0].startswith("PCCW 's chief operating officer")


def test_label_names():
    assert GLUE_TASKS["sst2"].label_names == ("negative", "positive")
    assert GLUE_TASKS["rte"].label_names == ("entailment", "not_entailment")
    assert GLUE_TASKS["mrpc"].label_names == ("not_paraphrase", "paraphrase")
    assert [GLUE_TASKS[t].is_pair for t in ("sst2", "rte", "mrpc")] == [False, True, True]


def test_unknown_task_or_split_lists_choices():
    with pytest.raises(ValueError, match="'sst2'.*'rte'.*'mrpc'"):
        load_glue("cola", "train")
    with pytest.raises(ValueError, match="train, dev, test"):
        load_glue("sst2", "validation")


def test_kbert_data_override(offline):
    tmp_path, _ = offline
    rows = (
        "index\tsentence1\tsentence2\tlabel\n"
        '0\tA "quoted\tB\tentailment\n'
        "1\t C \tD\tnot_entailment\n"
    )
    write(tmp_path / "data" / "glue" / "RTE" / "train.tsv", rows)
    assert load_glue("rte", "train") == ((['A "quoted', "C"], ["B", "D"]), [0, 1])


@pytest.mark.parametrize(
    "content, line_number, fragment",
    [
        ("sentence\tlabels\ngood\t1\n", 1, "found: 'sentence\\tlabels'"),
        ("", 1, "expected the header"),
        ("sentence\tlabel\ngood\t1\nbad\t1\textra\n", 3, "expected 2 tab-separated columns"),
        ("sentence\tlabel\ngood\t1\nno label column\n", 3, "found 1"),
        ("sentence\tlabel\ngood\t1\nok\t1\nhmm\tpositive\n", 4, "unknown label 'positive'"),
        (b"sentence\tlabel\ngood\t1\nbad \xc3\x28\t0\n", 3, "invalid UTF-8"),
    ],
    ids=["wrong-header", "empty-file", "extra-column", "missing-column", "bad-label", "bad-utf8"],
)
def test_malformed_sst2_file(tmp_path, content, line_number, fragment):
    path = write(tmp_path / "bad_dev.tsv", content)
    with pytest.raises(DataFormatError) as raised:
        load_glue("sst2", "dev", path=path)
    message = str(raised.value)
    assert f"bad_dev.tsv, line {line_number}:" in message
    assert fragment in message


def test_test_split_header_differs_from_labelled_header(tmp_path):
    path = write(tmp_path / "dev.tsv", "sentence\tlabel\nfine\t1\n")
    with pytest.raises(DataFormatError, match="line 1"):
        load_glue("sst2", "test", path=path)


def test_missing_download_source_is_named(offline):
    tmp_path, requested = offline
    with pytest.raises(FileNotFoundError) as raised:
        load_glue("sst2", "dev")
    message = str(raised.value)
    assert str(tmp_path / "data" / "glue" / "SST-2" / "dev.tsv") in message
    assert "KBERT_DATA" in message
    assert "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip" in message
    assert requested == ["https://dl.fbaipublicfiles.com/glue/data/SST-2.zip"]


def test_mrpc_is_never_downloaded(offline):
    _, requested = offline
    with pytest.raises(FileNotFoundError, match="https://gluebenchmark.com/tasks"):
        load_glue("mrpc", "train")
    assert requested == []


def test_cli_train_refuses_a_header_only_train_file_naming_it(offline, capsys):
    from kbert import cli
    from tests.test_case import TINY_VOCABULARY

    tmp_path, _ = offline
    train = write(tmp_path / "data" / "glue" / "SST-2" / "train.tsv", "sentence\tlabel\r\n")
    write(tmp_path / "data" / "glue" / "SST-2" / "dev.tsv", "sentence\tlabel\r\nfine\t1\r\n")
    write(tmp_path / "vocab.txt", "\n".join(TINY_VOCABULARY) + "\n")
    assert cli.main(["train", "sst2", "--encoder", "tiny", "--vocabulary", str(tmp_path / "vocab.txt"),
                     "--out", str(tmp_path / "run"), "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kbert train: error: {train}: the file has no examples, only a header"
