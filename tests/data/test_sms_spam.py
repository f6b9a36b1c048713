import io
import zipfile

import pytest

from kbert.data import DataFormatError, load_sms_spam, paths


@pytest.fixture
def real_data():
    """The real data sets, where the user keeps them: KBERT_DATA or ../shared/data."""


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty KBERT_DATA folder, a tmp cache, and no network."""
    monkeypatch.setenv("KBERT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()

    def no_network(url, out_file):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(paths, "fetch_url", no_network)
    return tmp_path


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def test_real_file_counts_and_rows(real_data):
    texts, labels = load_sms_spam()
    assert len(texts) == len(labels) == 5574
    assert sum(labels) == 747
    assert set(labels) == {0, 1}
    assert labels[0] == 0
    assert texts[0].startswith("Go until jurong point, crazy..")
    assert texts[1] == "Ok lar... Joking wif u oni..."
    assert labels[2] == 1 and texts[2].startswith("Free entry in 2 a wkly comp")
    assert texts[-1] == "Rofl. Its true to its name"


def test_kbert_data_override_and_explicit_path(offline):
    content = "spam\tWIN NOW\nham\thi there\nham\t\n"
    write(offline / "data" / "sms_spam_collection" / "SMSSpamCollection", content)
    # An empty message is data, not an error, and nothing is dropped.
    assert load_sms_spam() == (["WIN NOW", "hi there", ""], [1, 0, 0])
    other = write(offline / "elsewhere.txt", "ham\tonly one")
    assert load_sms_spam(other) == (["only one"], [0])


def test_tabs_inside_text_are_kept(tmp_path):
    path = write(tmp_path / "sms.txt", "ham\ta\tb\n")
    assert load_sms_spam(path) == (["a\tb"], [0])


@pytest.mark.parametrize(
    "content, line_number, fragment",
    [
        ("ham\tok\nspam\tok\nno tab on this line\n", 3, "'no tab on this line'"),
        ("ham\tok\nSpam\tcase matters\n", 2, "unknown label 'Spam'"),
        ("ham\tok\n\nham\tok\n", 2, "a tab"),
        (b"ham\tok\nspam\tbad \xe9 byte\n", 2, "invalid UTF-8"),
    ],
    ids=["no-tab", "bad-label", "blank-line", "invalid-utf8"],
)
def test_malformed_line_names_file_and_line(tmp_path, content, line_number, fragment):
    path = write(tmp_path / "bad_sms.txt", content)
    with pytest.raises(DataFormatError) as raised:
        load_sms_spam(path)
    message = str(raised.value)
    assert f"bad_sms.txt, line {line_number}:" in message
    assert fragment in message
    assert raised.value.line_number == line_number


def test_long_bad_line_is_shortened_in_message(tmp_path):
    path = write(tmp_path / "sms.txt", "x" * 500 + "\n")
    with pytest.raises(DataFormatError) as raised:
        load_sms_spam(path)
    assert "x" * 80 + "'..." in str(raised.value)
    assert "x" * 81 not in str(raised.value)


def test_missing_file_offline_explains_where_to_put_it(offline):
    with pytest.raises(FileNotFoundError) as raised:
        load_sms_spam()
    message = str(raised.value)
    assert str(offline / "data" / "sms_spam_collection" / "SMSSpamCollection") in message
    assert "KBERT_DATA" in message
    assert "https://archive.ics.uci.edu/static/public/228/sms+spam+collection.zip" in message
    assert not [p for p in offline.joinpath("cache").rglob("*") if p.is_file()]


def test_downloaded_zip_lands_in_cache_and_loads(offline, monkeypatch):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("readme", "about the corpus")
        archive.writestr("SMSSpamCollection", "ham\thello\nspam\tprize!\n")

    monkeypatch.setattr(paths, "fetch_url", lambda url, out_file: out_file.write(buffer.getvalue()))
    assert load_sms_spam() == (["hello", "prize!"], [0, 1])
    cached = offline / "cache" / "sms_spam_collection" / "SMSSpamCollection"
    assert cached.read_text() == "ham\thello\nspam\tprize!\n"
    assert sorted(p.name for p in (offline / "cache").rglob("*") if p.is_file()) == [
        "SMSSpamCollection"
    ]
