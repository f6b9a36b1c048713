import io
import sys

from kbert.io.progress_bar import progress_bar


def test_a_bar_in_a_log_file_is_one_plain_line(monkeypatch):
    log = io.StringIO()  # not a terminal, like a redirected `kbert train > log`
    monkeypatch.setattr(sys, "stdout", log)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    bar = progress_bar(5, unit_name="text")
    for step in range(1, 6):
        bar.update(step)
    written = log.getvalue()
    assert written.count("\n") == 1 and written.startswith("5/5")
    assert not any(character in written for character in "\r\x1b\b")


def test_a_bar_on_a_terminal_is_drawn(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    assert progress_bar(5).verbose == 1
