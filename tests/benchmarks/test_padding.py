"""benchmarks/padding.py's counting: the tokens each way of batching computes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.padding import WAYS, packed_rows, tokens  # noqa: E402


def test_each_way_counts_the_tokens_its_batches_compute():
    counted = tokens([[3, 5], [20]], sequence_length=64)
    assert [counted[way] for way in WAYS] == [
        3 * 64,  # every row at the full width
        2 * 8 + 24,  # each batch at its longest, rounded up to 8
        2 * 8 + 32,  # ... or to a power of two (JAX)
        2 * 5 + 20,  # ... or to its longest exactly
        64,  # all three in one packed row
        28,  # the real tokens
    ]


def test_packing_puts_each_example_where_it_fits_tightest():
    assert packed_rows([5, 3, 3, 2, 2, 1], 8) == 2  # 5+3 and 3+2+2+1: no room lost
    assert packed_rows([7, 7, 7], 8) == 3
    assert packed_rows([], 8) == 0
