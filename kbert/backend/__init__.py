"""What kbert computes differently on each Keras backend: the one place that knows the backend.

kbert's models are Keras 3 code and run on TensorFlow, JAX and PyTorch. Two
hot spots are faster written for each backend, and gradients outside `fit`
are each backend's own; everything else in kbert is the same code on all
three:

| | TensorFlow | JAX | PyTorch |
|---|---|---|---|
| `transformer_block` (BERT's post-LayerNorm block) | 2-D TF ops that the grappler remapper fuses into oneDNN kernels | `keras.ops`, attention through `jax.nn.dot_product_attention` (cuDNN's fused kernel on a GPU) | `keras.ops`, attention through `scaled_dot_product_attention` |
| `AdamW` (the base of `kbert.models.optimization.BertAdamW`) | TensorFlow's one-kernel Adam update | keras' AdamW (XLA fuses it into the step) | PyTorch's fused AdamW kernel, its global clipping in one multi-tensor norm |
| `gradient_function` (gradients outside `fit`: head importance) | `tf.GradientTape` in a `tf.function` | `jax.grad`, compiled (`jax.jit`) | `torch.autograd.grad` |
| `COMPILES_EACH_SHAPE` (batches padded to few widths) | no: one graph for all widths | yes: XLA compiles each | no: eager |
| `random_state`, `restore_random_state` (kept by backups) | none: Keras' seed generators | none: Keras' seed generators | PyTorch's generators, which its dropout draws from |
| `build_before_first_step` (optimizer, metrics and losses before `fit` traces its step) | built from the data's shapes: one trace, not two | nothing: Keras builds them first | nothing: Keras builds them first |
| `compile_transformer_blocks` (what `compile(jit_compile=True)` compiles) | nothing apart: the whole step | nothing apart: the whole step | each block through one `torch.compile`d program; the rest eager |

Each backend's module gives these names; this module re-exports the ones of
the backend Keras runs on, loaded on first use. Each fast path is tested
equal to the portable computation (keras-hub's `TransformerEncoder`, keras'
`AdamW`).

The decisions around the backend have a module each here too:

| module | what it decides |
|---|---|
| `selection` | which backend Keras runs on, TensorFlow's log level and oneDNN switch (before Keras loads), and TensorFlow kept off the GPUs on another backend |
| `onednn` | whether TensorFlow runs on oneDNN's kernels, and the warning where it does not |
| `tensorflow_support` | whether TensorFlow is installed, the message where it is missing, and its load-time log lines: kept out of the CLI, and shown once each, as `TF_CPP_MIN_LOG_LEVEL` says, by `import kbert` |
| `tensorflow_bridge` | a JAX or PyTorch model called from TF-Text preprocessing (`tf.py_function`) |
| `tensorflow_process` | a function run in a TensorFlow process that dies with its caller (export from JAX or PyTorch) |
| `model_inputs` | what Keras takes as data beside raw text (token ids, `PyDataset`, a PyTorch `DataLoader`) and how many batches it makes |
| `distribute` | training on several devices: a `tf.distribute` strategy on TensorFlow, `keras.distribution` on JAX (`--strategy`) |
"""

import importlib

from kbert.backend.selection import BACKENDS

# The names each backend's module gives (`kbert.backend.tensorflow`, `.jax`, `.torch`).
_SEAM = (
    "COMPILES_EACH_SHAPE",
    "AdamW",
    "build_before_first_step",
    "compile_transformer_blocks",
    "gradient_function",
    "random_state",
    "restore_random_state",
    "transformer_block",
)


def keras_backend():
    """The backend Keras runs on (Keras loads here, on first use, after `kbert.backend.selection` chose it)."""
    import keras

    backend = keras.config.backend()
    if backend not in BACKENDS:
        raise ImportError(
            f"kbert runs on Keras' tensorflow, jax and torch backends, not {backend!r}: set "
            "KERAS_BACKEND to one of them."
        )
    return backend


def __getattr__(name):
    # Loaded on first use, so that `kbert.backend.selection` and the other
    # modules here that do not need Keras import without it (`kbert --help`).
    if name == "BACKEND":
        value = keras_backend()
    elif name in _SEAM:
        value = getattr(importlib.import_module(f"kbert.backend.{keras_backend()}"), name)
    else:
        raise AttributeError(f"module 'kbert.backend' has no attribute {name!r}")
    globals()[name] = value
    return value


class LayersBeforeInit:
    """A base of functional `keras.Model`s that set their layers as attributes before `super().__init__`.

    keras-hub's pattern, which kbert's encoder and task models follow
    (layers, then the functional model, then the config). On PyTorch every
    Keras layer is a `torch.nn.Module`, and PyTorch refuses a sub-module set
    before `Module.__init__`: those attributes are set plainly there (the
    functional graph tracks the layers, and `.keras` files find them by
    attribute name as on the other backends).
    """

    def __setattr__(self, name, value):
        if _on_torch() and "_modules" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


def _on_torch():
    backend = globals().get("BACKEND") or __getattr__("BACKEND")
    return backend == "torch"


class UntrackedStepState:
    """A base of the models kbert trains with `fit`: Keras' JAX trainer's per-step state is set as a plain attribute.

    After every step Keras' JAX trainer sets `model._jax_state`, a dict of
    the step's arrays (~650 for BERT-base), so that a callback can ask for
    them. As a layer attribute, Keras' tracker walks every array of it
    first: some 13,700 Python calls per step at BERT-base's depth, host time
    that the device waits for whenever the loss is read each step (the
    progress bar, any per-batch callback). The arrays are not layer state
    (not variables, layers or seeds), so nothing is lost by setting them
    plainly.
    """

    def __setattr__(self, name, value):
        if name == "_jax_state":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


__all__ = ["BACKEND", "LayersBeforeInit", "UntrackedStepState", *_SEAM]
