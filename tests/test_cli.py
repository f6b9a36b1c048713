import kbert
from kbert import cli


def test_presets_lists_the_paper_parameter_counts(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "109,482,240" in out and "335,141,888" in out and "4,385,920" in out


def test_vocabulary_learns_from_files(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = tmp_path / "vocab.txt"
    assert cli.main(["vocabulary", str(tmp_path / "*.txt"), "--size", "60", "--out", str(out)]) == 0
    tokens = out.read_text().splitlines()
    assert tokens[:5] == list(kbert.SPECIAL_TOKENS)
    assert {"the", "cat", "sat"} <= set(tokens)
    assert not (tmp_path / "vocab.txt.tmp").exists()


def test_vocabulary_reports_a_missing_file(tmp_path, capsys):
    assert cli.main(["vocabulary", str(tmp_path / "none*.txt"), "--out", str(tmp_path / "v.txt")]) == 2
    assert "No file matches" in capsys.readouterr().err
    assert not (tmp_path / "v.txt").exists()
