"""`KeepSparsity`: a pruned encoder's zero kernel weights stay 0 while it trains; the masks it applies."""

import keras
import numpy as np
import tensorflow as tf

from kbert.compression.sparsity import find_encoder, prunable_kernels


class KernelMasks:
    """The prunable kernels of a model's encoder and their masks (1 kept, 0 pruned).

    The masks start as the kernels' non-zero weights: the zeros of a pruned
    model are its mask, wherever it was saved or loaded. They are TensorFlow
    variables held here, beside the model (not in it), so that applying them
    after every batch is one graph call, without NumPy round trips.
    """

    def __init__(self, model):
        self.kernels = [kernel for _, _, kernel in prunable_kernels(find_encoder(model))]
        self.sizes = [int(np.prod(kernel.shape)) for kernel in self.kernels]
        with model.distribute_strategy.scope():
            self.masks = [
                tf.Variable(tf.cast(tf.not_equal(_read(kernel), 0), kernel.dtype), trainable=False)
                for kernel in self.kernels
            ]
        self.apply = tf.function(self._apply)
        self._prune_each = tf.function(self._prune_each_kernel)
        self._prune_all = tf.function(self._prune_all_kernels)
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
            self._prune_each(tf.constant(counts, tf.int32))
            self.pruned = self._count_pruned()
        else:
            self.apply()  # the last optimizer step moved the pruned weights too

    def prune_globally(self, count):
        """Prunes the `count` smallest weights of all kernels together (those already pruned first)."""
        count = max(count, sum(self.pruned))
        if count != sum(self.pruned):
            self._prune_all(tf.constant(count, tf.int32))
            self.pruned = self._count_pruned()
        else:
            self.apply()

    def _count_pruned(self):
        return [size - int(tf.reduce_sum(mask)) for size, mask in zip(self.sizes, self.masks)]

    def _apply(self):
        for kernel, mask in zip(self.kernels, self.masks):
            kernel.assign(_read(kernel) * mask)

    def _scores(self, kernel, mask):
        # Magnitudes, with the pruned weights below every kept one.
        magnitude = tf.reshape(tf.abs(_read(kernel)), [-1])
        return tf.where(tf.reshape(mask, [-1]) > 0, magnitude, -tf.ones_like(magnitude))

    @staticmethod
    def _keep_mask(scores, count):
        _, smallest = tf.math.top_k(-scores, count)
        return tf.tensor_scatter_nd_update(
            tf.ones_like(scores), smallest[:, None], tf.zeros(tf.shape(smallest), scores.dtype)
        )

    def _prune_each_kernel(self, counts):
        for i, (kernel, mask) in enumerate(zip(self.kernels, self.masks)):
            keep = self._keep_mask(self._scores(kernel, mask), counts[i])
            mask.assign(tf.reshape(keep, tf.shape(mask)))
        self._apply()

    def _prune_all_kernels(self, count):
        scores = tf.concat([self._scores(kernel, mask) for kernel, mask in zip(self.kernels, self.masks)], 0)
        keep = self._keep_mask(scores, count)
        for mask, part in zip(self.masks, tf.split(keep, self.sizes)):
            mask.assign(tf.reshape(part, tf.shape(mask)))
        self._apply()


def _read(variable):
    # The variable's own value (float32 under mixed precision too).
    return tf.convert_to_tensor(variable.value)


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
        self.masks.apply()
        self._log(logs)

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
