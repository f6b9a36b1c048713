"""Peak memory of the test run, printed at its end as `--durations` prints times.

Each process that runs tests (each pytest-xdist worker, or pytest itself
with `-n 0`) records its peak resident memory and, per test module, how much
its resident memory grew while the module's tests ran (fixture set-up and
tear-down included). Workers send theirs to the controller in
`workeroutput`; the controller prints one section:

    ==== peak memory ====
    gw0: peak 2,345 MB, at the end 1,234 MB
    ...
    growth   peak+  worker  module

"Peak" is `ru_maxrss`; "growth" is resident memory after the module's last
test less before its first (what it left behind); "peak+" is how much the
module raised the process's peak. Child processes (notebook kernels,
subprocesses) are not counted: their memory is their own.
"""

import os
import resource
import sys

import pytest

KEY = "kbert_memory"
TOP_MODULES = 10


def peak_mb():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def reset_peak():
    """Starts `peak_since_reset` anew (Linux: the process's resident high-water mark, VmHWM); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_since_reset():
    """The most resident memory since `reset_peak` (VmHWM, MB)."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**10


def current_mb():
    """Resident memory now (Linux); elsewhere, the peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_mb()


def module_of(item):
    return item.nodeid.split("::")[0]


class MemoryReport:
    def __init__(self, config):
        self.config = config
        self.modules = {}  # module -> [growth MB, peak increase MB]
        self.workers = {}  # worker id -> this plugin's record on that worker
        self.ran_tests = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        self.ran_tests = True
        before, peak_before = current_mb(), peak_mb()
        yield
        record = self.modules.setdefault(module_of(item), [0.0, 0.0])
        record[0] += current_mb() - before
        record[1] += peak_mb() - peak_before

    def record(self):
        return {
            "peak_mb": peak_mb(),
            "end_mb": current_mb(),
            "modules": {name: list(values) for name, values in self.modules.items()},
        }

    def pytest_sessionfinish(self, session):
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:  # on a pytest-xdist worker
            workeroutput[KEY] = self.record()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        record = getattr(node, "workeroutput", {}).get(KEY)
        if record is not None:
            self.workers[node.gateway.id] = record

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):
            return
        workers = dict(self.workers)
        if self.ran_tests or not workers:  # no xdist (`-n 0`): this process ran the tests
            workers["main"] = self.record()
        write = terminalreporter.write_line
        terminalreporter.write_sep("=", "peak memory")
        for name, record in sorted(workers.items()):
            write(f"{name}: peak {record['peak_mb']:,.0f} MB, at the end {record['end_mb']:,.0f} MB")
        modules = [
            (growth, peak, name, module)
            for name, record in workers.items()
            for module, (growth, peak) in record["modules"].items()
        ]
        modules.sort(key=lambda m: (-m[0], -m[1]))
        if modules:
            write(f"{'growth':>9} {'peak+':>9}  worker  module (top {TOP_MODULES} by RSS growth)")
            for growth, peak, name, module in modules[:TOP_MODULES]:
                write(f"{growth:>6,.0f} MB {peak:>6,.0f} MB  {name:<6}  {module}")
