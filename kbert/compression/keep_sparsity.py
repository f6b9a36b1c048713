"""`KeepSparsity`: a pruned encoder's zero kernel weights stay 0 while it trains; the masks it applies."""

import keras
import numpy as np
from keras import ops

from kbert.compression.sparsity import find_encoder, prunable_kernels


class KernelMasks:
    """The prunable kernels of a model's encoder and their masks (1 kept, 0 pruned).

    The masks start as the kernels' non-zero weights: the zeros of a pruned
    model are its mask, wherever it was saved or loaded. They are tensors of
    the backend, held here beside the model (not in it, so not saved), and
    `apply` multiplies each kernel by its mask where the kernel lives.
    """

    def __init__(self, model):
        encoder = find_encoder(model)
        if getattr(encoder, "lora", None) is not None:
            raise ValueError("This encoder has LoRA adapters beside its frozen kernels: prune "
                             "`model.merge_lora()`, whose kernels hold them.")
        self.kernels = [kernel for _, _, kernel in prunable_kernels(encoder)]
        self.sizes = [int(np.prod(kernel.shape)) for kernel in self.kernels]
        self.masks = [ops.cast(ops.not_equal(kernel.value, 0), kernel.dtype) for kernel in self.kernels]
        self.pruned = self._count_pruned()

    @property
    def total(self):
        return sum(self.sizes)

    @property
    def sparsity(self):
        """The fraction of all prunable weights pruned."""
        return sum(self.pruned) / self.total if self.total else 0.0

    def kernel_sparsities(self):
        return [pruned / size if size else 0.0 for pruned, size in zip(self.pruned, self.sizes)]

    def prune(self, counts):
        """Prunes the `counts[i]` smallest weights of kernel `i` (those already pruned first).

        The masks are applied in any case, also when they do not change.
        """
        counts = [max(count, pruned) for count, pruned in zip(counts, self.pruned)]
        if counts != self.pruned:
            for i, (kernel, mask) in enumerate(zip(self.kernels, self.masks)):
                keep = _keep_mask(_scores(kernel, mask), counts[i])
                self.masks[i] = ops.reshape(keep, ops.shape(mask))
            self.pruned = self._count_pruned()
        self.apply()  # the last optimizer step moved the pruned weights too

    def prune_globally(self, count):
        """Prunes the `count` smallest weights of all kernels together (those already pruned first)."""
        count = max(count, sum(self.pruned))
        if count != sum(self.pruned):
            scores = ops.concatenate([_scores(kernel, mask) for kernel, mask in zip(self.kernels, self.masks)], 0)
            keep = _keep_mask(scores, count)
            parts = ops.split(keep, np.cumsum(self.sizes)[:-1].tolist())
            self.masks = [ops.reshape(part, ops.shape(mask)) for part, mask in zip(parts, self.masks)]
            self.pruned = self._count_pruned()
        self.apply()

    def apply(self):
        """Sets every pruned weight to 0."""
        for kernel, mask in zip(self.kernels, self.masks):
            kernel.assign(kernel.value * mask)

    def _count_pruned(self):
        return [size - int(ops.convert_to_numpy(ops.sum(mask))) for size, mask in zip(self.sizes, self.masks)]


def _scores(kernel, mask):
    # Magnitudes (of the variable's own float32 value under mixed precision
    # too), with the pruned weights below every kept one.
    magnitude = ops.reshape(ops.abs(kernel.value), [-1])
    return ops.where(ops.reshape(mask, [-1]) > 0, magnitude, -ops.ones_like(magnitude))


def _keep_mask(scores, count):
    """1 for each score but the `count` smallest, which get 0."""
    keep = ops.ones_like(scores)
    if count == 0:
        return keep
    _, smallest = ops.top_k(-scores, count)
    return ops.scatter_update(keep, ops.expand_dims(smallest, -1), ops.zeros((count,), scores.dtype))


class KeepSparsity(keras.callbacks.Callback):
    """Keeps the pruned (zero) kernel weights of a model's encoder at 0 while it trains.

    The mask is the set of prunable weights that are 0 when `fit` starts; it
    is applied after every training batch, and `sparsity` (the fraction of
    prunable weights that are 0) goes into the logs. The `fit` of a kbert
    task model or `kbert.Pretrainer` adds this callback by itself when the
    model is pruned (`keep_sparsity` in its config, set by
    `kbert.MagnitudePruning`); add it by hand to the `fit` of another model
    around a pruned encoder.
    """

    masks = None

    def on_train_begin(self, logs=None):
        self.masks = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.masks is None:
            # At the first batch rather than in `on_train_begin`: after every
            # callback's `on_train_begin`, so after a backup restored the weights.
            self.masks = KernelMasks(self.model)
            self.start()

    def start(self):
        """Called once the masks are read, before the first batch of a `fit`."""

    def on_train_batch_end(self, batch, logs=None):
        self.synced_masks().apply()
        self._log(logs)

    def synced_masks(self):
        """The masks, after the model's variables hold the weights of the last step.

        On JAX, `fit` keeps the weights out of the model's variables during
        an epoch; a callback's `model` puts them back (and its later steps
        then read what the masks left).
        """
        self.model  # noqa: B018 (read for its side effect on JAX)
        return self.masks

    def on_epoch_end(self, epoch, logs=None):
        self._log(logs)

    def _log(self, logs):
        if logs is not None and self.masks is not None:
            logs["sparsity"] = self.masks.sparsity


def with_sparsity_kept(model, callbacks):
    """The callbacks for a `fit` of `model`: pruning callbacks first, and `KeepSparsity` for a pruned model.

    First, so that the `sparsity` they log is in the logs when TensorBoard
    and the others read them; a pruned model (`keep_sparsity`) trained
    without one gets a `KeepSparsity`, so that its pruned weights stay 0.
    """
    callbacks = list(callbacks or [])
    pruning = [callback for callback in callbacks if isinstance(callback, KeepSparsity)]
    others = [callback for callback in callbacks if not isinstance(callback, KeepSparsity)]
    if not pruning and getattr(model, "keep_sparsity", False):
        pruning = [KeepSparsity()]
    return pruning + others
