"""Screenshots of every TensorBoard dashboard of kbert's runs, as a person opens them.

Makes a `runs/` folder the way a new user would (unless `--logdir` names one):
`kbert train sst2` twice with different learning rates and `kbert pretrain`
once on a Gutenberg book, all with the tiny preset; starts `tensorboard
--logdir runs`, opens each dashboard in headless Chromium (Debian's
`chromium` package: `apt-get install chromium`) and saves a PNG of it. Prints
a table of the pictures and writes JSON (default
`benchmarks/results/tensorboard_screenshots.json`). Not part of `make test`.

    .venv/bin/python benchmarks/tensorboard_screenshots.py --out docs/images   # about 5 min on 2 cores
    .venv/bin/python benchmarks/tensorboard_screenshots.py --logdir runs --out /tmp/shots
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

DATA = os.environ.get("KBERT_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
# The dashboards, by the part of TensorBoard's address after "#".
# The dashboards, by the part of TensorBoard's address after "#", and the window width each needs.
DASHBOARDS = {"timeseries": 1400, "scalars": 1400, "hparams": 1900, "images": 1400, "projector": 1400,
              "text": 1400}


def make_runs(runs, quick):
    """Two fine-tuning runs that differ in their learning rate, and one pretraining run."""
    examples, eval_examples = ("200", "100") if quick else ("2000", "300")
    for name, rate in (("sst2-lr3e-4", "3e-4"), ("sst2-lr1e-3", "1e-3")):
        kbert(["train", "sst2", "--encoder", "tiny", "--out", os.path.join(runs, name), "--epochs", "3",
               "--max-examples", examples, "--max-eval-examples", eval_examples, "--learning-rate", rate,
               "--batch-size", "32", "--quiet"])
    book = os.path.join(DATA, "gutenberg", sorted(os.listdir(os.path.join(DATA, "gutenberg")))[0])
    kbert(["pretrain", "--corpus", book if os.path.isfile(book) else os.path.join(book, "*.txt"),
           "--out", os.path.join(runs, "pretrain-tiny"), "--preset", "tiny", "--vocabulary-size", "2000",
           "--sequence-length", "64", "--batch-size", "16", "--epochs", "3",
           "--steps-per-epoch", "20" if quick else "100", "--quiet"])


def kbert(arguments):
    print("kbert", " ".join(arguments), flush=True)
    subprocess.run([sys.executable, "-m", "kbert.cli", *arguments], check=True)


@contextlib.contextmanager
def tensorboard(log_dir):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", log_dir,
                               "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{address}/data/runs", timeout=10) as response:
                    if json.loads(response.read()):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("TensorBoard did not start")
            time.sleep(0.5)
        # The Projector decides in the background whether it has data: asked once, it lists
        # itself as inactive until that is done, and the page would show it so.
        while True:
            with urllib.request.urlopen(f"{address}/data/plugins_listing", timeout=10) as response:
                if json.loads(response.read()).get("projector", {}).get("enabled"):
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        yield address
    finally:
        server.terminate()
        server.wait(30)


def screenshot(page, address, dashboard, path, width, height, wait_ms):
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{address}/#{dashboard}")
    page.wait_for_timeout(wait_ms)
    if dashboard == "projector":
        # What a person does first: colour the points by their class.
        frame = next(frame for frame in page.frames if "projector_binary" in frame.url)
        menu = frame.locator('paper-dropdown-menu[label="Color by"]')
        menu.click()
        menu.locator("paper-item").filter(has_text="label").first.click()
        page.wait_for_timeout(2000)
    page.screenshot(path=path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", help="runs to show (default: made here in a temporary folder)")
    parser.add_argument("--out", default="docs/images", help="folder of the PNG files")
    parser.add_argument("--json", default="benchmarks/results/tensorboard_screenshots.json")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--height", type=int, default=1000, help="window height in pixels")
    parser.add_argument("--wait-ms", type=int, default=8000, help="page time before each picture")
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    args = parser.parse_args(argv)
    if not os.path.exists(args.chromium):
        parser.error(f"--chromium: {args.chromium} does not exist (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        parser.error("this script needs Playwright: .venv/bin/pip install playwright")
    os.makedirs(args.out, exist_ok=True)
    with contextlib.ExitStack() as stack:
        log_dir = args.logdir
        if log_dir is None:
            log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbert-runs-"))
            make_runs(log_dir, args.quick)
        address = stack.enter_context(tensorboard(log_dir))
        browser = stack.enter_context(sync_playwright()).chromium.launch(
            executable_path=args.chromium,
            # WebGL in software for the Projector; no calls out of a closed network.
            args=["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page()
        rows = []
        for dashboard, width in DASHBOARDS.items():
            path = os.path.join(args.out, f"tensorboard-{dashboard}.png")
            start = time.monotonic()
            screenshot(page, address, dashboard, path, width, args.height, args.wait_ms)
            rows.append({"dashboard": dashboard, "file": path, "bytes": os.path.getsize(path),
                         "seconds": round(time.monotonic() - start, 1)})
        browser.close()
    print(f"{'dashboard':<12}{'bytes':>10}{'seconds':>9}  file")
    for row in rows:
        print(f"{row['dashboard']:<12}{row['bytes']:>10}{row['seconds']:>9}  {row['file']}")
    result = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "window_height": args.height, "runs": args.logdir or "made here", "screenshots": rows}
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as file:
        json.dump(result, file, indent=2)


if __name__ == "__main__":
    main()
