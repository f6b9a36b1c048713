"""Timing shared by the speed benchmark's workers (kbert's environment and the peer one): no dependencies."""

import statistics
import time


def timed(step, warmup, budget_seconds, min_steps):
    """Seconds per call of `step`: the median after `warmup` calls, over at least `min_steps`."""
    for _ in range(warmup):
        step()
    times = []
    start = time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < budget_seconds:
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), len(times)
