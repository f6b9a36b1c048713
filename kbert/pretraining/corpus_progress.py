"""What a long pass over a text corpus shows while it runs, and reports when it ends (on stderr)."""

import sys
import time

# Seconds between progress lines: rewritten on a terminal, appended elsewhere.
_TERMINAL_INTERVAL = 0.2
_PLAIN_INTERVAL = 10.0


class Progress:
    """Counts of a long pass over a corpus, shown while it runs (on stderr).

    On a terminal one line is rewritten in place (a carriage return, no
    escape codes) a few times a second; elsewhere (a log file, a pipe) plain
    lines come every `_PLAIN_INTERVAL` seconds and whenever `show` is forced,
    so a log holds no control characters. `finish` ends with a last line.
    """

    def __init__(self, describe, verbose=True, stream=None):
        self.describe = describe  # () -> the line of counts
        self.verbose = verbose
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self.start = self.last = time.monotonic()
        self.width = 0

    def show(self, force=False):
        if not self.verbose:
            return
        now = time.monotonic()
        if not force and now - self.last < (_TERMINAL_INTERVAL if self.terminal else _PLAIN_INTERVAL):
            return
        self.last = now
        line = f"{self.describe()} ({now - self.start:.0f} s)"
        if self.terminal:
            # Spaces cover the end of a longer line written before.
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self):
        if not self.verbose:
            return
        self.show(force=True)
        if self.terminal:
            self.stream.write("\n")
            self.stream.flush()


def reading_line(source, pairs, shards=None):
    """The progress line of a pass over `source` (a `TextPairs`): files, documents, pairs (and shards)."""
    stats = source.corpus_stats
    line = (f"Reading the corpus: {stats.files:,}/{len(source.files):,} file(s), "
            f"{stats.documents:,} documents, {pairs:,} pairs")
    return line + (f", {shards:,} shard(s)" if shards is not None else "")


def end_pass(progress, source, count):
    """Ends a pass that gave `count` pairs: its last progress line, what it read and skipped; an error if nothing."""
    progress.finish()
    if progress.verbose:
        print(f"Pretraining corpus: {source.summary()}", file=sys.stderr, flush=True)
    if count == 0:
        raise ValueError(f"The corpus gives no pretraining examples: {source.summary()}.")


def count_pairs(source, verbose):
    """One pass over the pairs: their number, and errors raised here, not in tf.data."""
    count = 0
    progress = Progress(lambda: reading_line(source, count), verbose)
    for _ in source():
        count += 1
        progress.show()
    end_pass(progress, source, count)
    return count
