"""Fused attention beside the explicit computation, on the same weights: outputs and gradients agree (JAX, PyTorch).

The check to run in the same GPU call as `benchmarks/gpu.py`, before its
figures are believed. For each backend, in a process of its own, one
Transformer block of `kbert.Encoder.from_preset(...)` (`dropout=0`,
`attention_dropout=0`, so that a training step is deterministic and
attends through the fused kernel) runs three ways on the same weights and
inputs:

- `fused`: `mixed_bfloat16`, attention through the backend's kernel
  (`kbert.backend.<backend>.dot_product_attention`: cuDNN's on a JAX GPU,
  `scaled_dot_product_attention` on PyTorch);
- `explicit`: `mixed_bfloat16`, attention computed explicitly
  (`kbert.backend.portable.explicit_attention`);
- `reference`: float32, explicit;
- on PyTorch also `compiled`: `mixed_bfloat16`, the block as one
  `torch.compile`d program (`kbert.backend.torch.block_math`, what
  `compile(jit_compile=True)` runs there).

on three padding masks: none, each row's tokens then its padding (lengths
from 1 to the full width), and masks with holes (`[1, 0, 1, 1, ...]`,
which cuDNN's lengths cannot say). The block's output and the gradient of
a fixed random projection of it with respect to its inputs are compared
with the float32 reference (the largest error, relative to the largest
reference value). The fused (and compiled) path passes when its error is within twice
the explicit bfloat16 path's own, plus 1e-3: bfloat16's tolerance, not
an absolute one. Prints a table, writes JSON, and exits 1 when a check
fails. Needs no TensorFlow.

    python benchmarks/fused_attention_check.py            # BERT-base's block on the GPU
    python benchmarks/fused_attention_check.py --tiny     # a tiny block on the CPU: the smoke test
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.timing import write_json  # noqa: E402 (after the path is set)

BACKENDS = ("jax", "torch")
MASKS = ("none", "trailing padding", "holes")
# The shapes: (preset, batch, sequence length).
BASE = ("base", 8, 128)
TINY = ("tiny", 2, 16)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny block and batch (CPU smoke test)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--out", type=Path, help="JSON results (default benchmarks/results/"
                                                 "fused_attention_check.json, ...-tiny.json with --tiny)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*json.loads(args.worker))
    name = "fused_attention_check-tiny.json" if args.tiny else "fused_attention_check.json"
    out = args.out or ROOT / "benchmarks" / "results" / name
    report = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d"),
              "machine": platform.node(), "shape": dict(zip(("preset", "batch", "length"), TINY if args.tiny
                                                             else BASE)), "rows": []}
    for backend in args.backends:
        environment = {**os.environ, "KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
        result = subprocess.run([sys.executable, __file__, "--worker", json.dumps([backend, args.tiny])],
                                env=environment, capture_output=True, text=True)
        rows = [json.loads(line[len("RESULT "):]) for line in result.stdout.splitlines()
                if line.startswith("RESULT ")]
        if not rows:
            last = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
            rows = [{"backend": backend, "mask": mask, "error": last[0]} for mask in MASKS]
        report["rows"] += rows
        write_json(out, report)
    print(table(report))
    print(f"\nwritten to {out}")
    return 0 if all(row.get("passed") for row in report["rows"]) else 1


def worker(backend, tiny):
    """In the backend's process: a `RESULT {json}` line per padding mask."""
    import importlib

    import keras
    import numpy as np

    from kbert.models.encoder import Encoder

    preset, batch, length = TINY if tiny else BASE
    module = importlib.import_module(f"kbert.backend.{backend}")
    fused = module.dot_product_attention

    def encoder_of(dtype):
        keras.utils.set_random_seed(0)  # the same weights in both precisions
        return Encoder.from_preset(preset, vocabulary_size=1000, dropout=0.0, attention_dropout=0.0, dtype=dtype)

    encoders = {"bfloat16": encoder_of("mixed_bfloat16"), "float32": encoder_of("float32")}
    hidden, heads = encoders["float32"].hidden_dim, encoders["float32"].num_heads
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(batch, length, hidden)).astype("float32")
    projection = rng.normal(size=(batch, length, hidden)).astype("float32")
    lengths = np.linspace(1, length, batch).astype(int)
    masks = {
        "none": None,
        "trailing padding": (np.arange(length)[None, :] < lengths[:, None]).astype("int32"),
        "holes": np.where(rng.random((batch, length)) < 0.3, 0, 1).astype("int32"),
    }
    masks["holes"][:, 0] = 1  # every row keeps a token to attend

    def explicit(*args):  # an `attend` that leaves attention to the explicit computation
        return None

    def run(precision, attend, mask, compiled=False):
        # The block's own call (mixed precision casts there), with `attend` as the backend's kernel.
        block = encoders[precision].transformer_layers[0]
        module.dot_product_attention = attend
        block.compiled_with_torch = compiled
        try:
            return _output_and_gradient(backend, block, inputs, projection, mask)
        finally:
            module.dot_product_attention = fused
            block.compiled_with_torch = False

    paths = {"fused": (fused, False), "explicit": (explicit, False)}
    if backend == "torch":
        paths["compiled"] = (fused, True)

    for name, mask in masks.items():
        row = {"backend": backend, "mask": name, "device": _device(backend),
               "kernel": _kernel(backend, heads, hidden // heads)}
        try:
            reference = run("float32", explicit, mask)
            errors = {}
            for path, (attend, compiled) in paths.items():
                output, gradient = run("bfloat16", attend, mask, compiled)
                errors[path] = {"output": _relative_error(output, reference[0]),
                                "gradient": _relative_error(gradient, reference[1])}
            row["errors"] = errors
            row["passed"] = all(errors[path][part] <= 2 * errors["explicit"][part] + 1e-3
                                for path in errors if path != "explicit" for part in ("output", "gradient"))
        except Exception as error:  # noqa: BLE001 (a failed row is reported)
            row["error"] = f"{type(error).__name__}: {error}"[:500]
        print("RESULT " + json.dumps(row), flush=True)
    return 0


def _output_and_gradient(backend, block, inputs, projection, mask):
    """The block's output in training, and the gradient of `sum(output * projection)` for its inputs, as float32 NumPy."""
    import numpy as np

    if backend == "jax":
        import jax
        import jax.numpy as jnp

        padding_mask = None if mask is None else jnp.asarray(mask)

        def loss(x):
            output = block(x, padding_mask=padding_mask, training=True).astype("float32")
            return jnp.sum(output * projection), output

        (_, output), gradient = jax.value_and_grad(loss, has_aux=True)(jnp.asarray(inputs))
        return np.asarray(output, "float32"), np.asarray(gradient, "float32")
    import torch
    from keras.src.backend.torch.core import get_device

    x = torch.tensor(inputs, device=get_device(), requires_grad=True)
    padding_mask = None if mask is None else torch.tensor(mask, device=get_device())
    output = block(x, padding_mask=padding_mask, training=True).float()
    (output * torch.tensor(projection, device=get_device())).sum().backward()
    return output.detach().cpu().numpy(), x.grad.detach().float().cpu().numpy()


def _relative_error(value, reference):
    import numpy as np

    return float(np.max(np.abs(value - reference)) / max(float(np.max(np.abs(reference))), 1e-12))


def _kernel(backend, heads, head_dim):
    """Which kernel `fused` runs: cuDNN's or XLA's on JAX; on PyTorch, SDPA picks one itself."""
    if backend != "jax":
        return "scaled_dot_product_attention"
    import jax.numpy as jnp

    from kbert.backend.jax import _cudnn_applies

    return "cudnn" if _cudnn_applies(jnp.zeros((1, 1, heads, head_dim), "bfloat16")) else "xla"


def _device(backend):
    if backend == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def table(report):
    lines = ["| backend | mask | kernel | output error (each bf16 path) | gradient error (each bf16 path) | passed |",
             "|---|---|---|---|---|---|"]
    for row in report["rows"]:
        if "error" in row:
            lines.append(f"| {row['backend']} | {row['mask']} | - | {row['error']} | | no |")
            continue
        cells = [", ".join(f"{path} {errors[part]:.2e}" for path, errors in row["errors"].items())
                 for part in ("output", "gradient")]
        lines.append(f"| {row['backend']} | {row['mask']} | {row['kernel']} | {cells[0]} | {cells[1]} | "
                     f"{'yes' if row['passed'] else 'NO'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
