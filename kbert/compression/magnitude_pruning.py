"""`kbert.MagnitudePruning`: magnitude (weight) pruning of an encoder's Transformer kernels as it trains."""

import numbers
import os

import keras
import numpy as np

from kbert.compression.keep_sparsity import KeepSparsity, KernelMasks
from kbert.compression.sparsity import sparsity as sparsity_report
from kbert.io.safe_loading import check_keras_file, keras_loading_refusal

SCOPES = ("layer", "global")


def sparsity_at_step(step, target_sparsity, begin_step, end_step, initial_sparsity=0.0):
    """The sparsity Zhu & Gupta's (2017) schedule asks for at `step`.

    It rises from `initial_sparsity` at `begin_step` to `target_sparsity` at
    `end_step` as `1 - (1 - t)^3` of the way, `t` the fraction of the steps
    between them done: fast at first, while many weights are redundant,
    slowly near the end. Before `begin_step` it is `initial_sparsity`,
    after `end_step` the target.

    Example:
    >>> [round(sparsity_at_step(step, 0.8, 0, 100), 3) for step in (0, 50, 100, 200)]
    [0.0, 0.7, 0.8, 0.8]
    """
    if step <= begin_step:
        return float(initial_sparsity)
    if step >= end_step:
        return float(target_sparsity)
    remaining = 1.0 - (step - begin_step) / (end_step - begin_step)
    return float(target_sparsity + (initial_sparsity - target_sparsity) * remaining**3)


class MagnitudePruning(KeepSparsity):
    """Prunes the smallest weights of an encoder's Transformer kernels while the model trains.

    Gradual magnitude pruning (Zhu & Gupta, 2017): every `frequency` steps
    between `begin_step` and `end_step`, the weights of smallest magnitude
    are set to 0, more each time, until `target_sparsity` of them are; the
    sparsity follows `sparsity_at_step` (cubic: fast at first, gently near
    the end), from the sparsity already present when `fit` starts. Pruned
    weights stay exactly 0: their mask is applied after every training
    batch, and sparsity never decreases.

    Pruned are the dense kernels of every Transformer block: the attention's
    query, key, value and output kernels and the feed-forward's two kernels
    (in ALBERT each shared block once). Embeddings, the embedding projection,
    biases, LayerNorm, the pooler and the task heads are not pruned.

    The mask is the set of zero weights, so it lives in the weights
    themselves: a pruned model saved as `.keras` or exported with
    `kbert.export` carries it. The callback also marks a kbert task model or
    `kbert.Pretrainer` as pruned (`keep_sparsity=True`, kept in its config),
    after which its plain `fit` keeps the zeros (see `kbert.compression.KeepSparsity`).

    With `rewind=True` (lottery-ticket rewinding: Frankle & Carbin, 2019;
    Chen et al., 2020 for BERT), at the end of `fit` every weight of the
    model goes back to its value at the start of that `fit` (the weights
    before fine-tuning) and the mask is applied again: a following `fit`
    retrains only the sub-network found. `rewind_to` rewinds to given
    weights instead.

    The log key `sparsity` (the fraction of prunable weights that are 0)
    reaches the progress bar, `History` and TensorBoard (as
    `epoch/sparsity` with `kbert.callbacks.TensorBoard`, `epoch_sparsity`
    with Keras'). A kbert model's `fit` puts this callback before the
    others; with another model, list it before `keras.callbacks.TensorBoard`.

    Args:
        target_sparsity: the fraction of the prunable weights to prune, in [0, 1).
        begin_step: the step (batch of this `fit`, from 0) pruning starts at.
        end_step: the step the target is reached at; default the last step
            of this `fit` (its steps per epoch times its epochs).
        frequency: steps between two mask updates.
        scope: `"layer"` to prune each kernel to the sparsity by its own
            magnitudes, `"global"` for one threshold over all the kernels
            (kernels whose weights are smaller end up sparser).
        rewind: whether to rewind the surviving weights at the end of `fit`
            to their values at its start.
        rewind_to: the weights to rewind to instead (implies `rewind`): a
            list of arrays as `model.get_weights()` gives, or the path of a
            `.keras` or `.weights.h5` file of the same model.

    Example:
    >>> texts, labels = ["a good film", "a bad film"] * 4, [1, 0] * 4
    >>> vocab = kbert.learn_vocabulary(texts, vocabulary_size=40, verbose=False)
    >>> model = kbert.classifier("tiny", vocabulary=vocab, sequence_length=8)
    >>> pruning = kbert.MagnitudePruning(0.5, frequency=1)
    >>> history = model.fit(texts, labels, batch_size=2, epochs=2, callbacks=[pruning], verbose=0)
    >>> [round(value, 4) for value in history.history["sparsity"]]  # 4 steps an epoch
    [0.4375, 0.5]
    >>> round(kbert.compression.sparsity(model)["sparsity"], 2), model.keep_sparsity
    (0.5, True)
    """

    def __init__(self, target_sparsity, begin_step=0, end_step=None, frequency=10, scope="layer",
                 rewind=False, rewind_to=None):
        super().__init__()
        if isinstance(target_sparsity, bool) or not isinstance(target_sparsity, numbers.Real) or not (
            0 <= target_sparsity < 1
        ):
            raise ValueError(f"`target_sparsity` must be in [0, 1), got {target_sparsity!r}.")
        _check_step("begin_step", begin_step, minimum=0)
        if end_step is not None:
            _check_step("end_step", end_step, minimum=0)
            if end_step <= begin_step:
                raise ValueError(
                    f"`end_step` ({end_step}) must come after `begin_step` ({begin_step})."
                )
        _check_step("frequency", frequency, minimum=1)
        if scope not in SCOPES:
            raise ValueError(f"`scope` must be one of {SCOPES}, got {scope!r}.")
        if isinstance(rewind_to, (str, os.PathLike)) and not os.path.exists(rewind_to):
            raise FileNotFoundError(f"`rewind_to`: no file {os.fspath(rewind_to)!r}.")
        self.target_sparsity = float(target_sparsity)
        self.begin_step = int(begin_step)
        self.end_step = None if end_step is None else int(end_step)
        self.frequency = int(frequency)
        self.scope = scope
        self.rewind = bool(rewind) or rewind_to is not None
        self.rewind_to = rewind_to

    @classmethod
    def prune(cls, model, sparsity, scope="layer"):
        """Prunes a model's encoder to `sparsity` at once (one-shot magnitude pruning).

        The smallest weights of the prunable kernels (each kernel by its
        own, or all together with `scope="global"`) become 0, and a kbert
        model is marked pruned, so that its `fit` keeps them at 0.
        Returns the `kbert.compression.sparsity` report of the result.

        Example:
        >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=100, num_layers=1)
        >>> report = kbert.MagnitudePruning.prune(encoder, 0.9)
        >>> round(report["sparsity"], 3)
        0.9
        """
        pruning = cls(sparsity, end_step=1, scope=scope)
        pruning.set_model(model)
        pruning.masks = KernelMasks(model)
        pruning._prune_to(lambda initial: sparsity)
        _mark_pruned(model)
        return sparsity_report(model)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._step = 0
        self._epoch_start = 0
        self._last_update = None
        self._end = self.end_step
        self._initial = None
        self._rewind_weights = None

    def start(self):
        self._initial = self.masks.kernel_sparsities() if self.scope == "layer" else [self.masks.sparsity]
        if self.rewind:
            self._rewind_weights = self._weights_to_rewind_to()
        _mark_pruned(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        if self._end is None:
            # The first epoch of this `fit` (after `initial_epoch`) tells how many it runs.
            steps = self.params.get("steps")
            if not steps:
                raise ValueError(
                    "MagnitudePruning cannot tell the last step of this fit (its data has no known "
                    "length): pass `end_step`, or `steps_per_epoch` to fit."
                )
            self._end = steps * (self.params["epochs"] - epoch)
            if self._end <= self.begin_step:
                raise ValueError(
                    f"`begin_step` ({self.begin_step}) is not before the last step of this fit "
                    f"({self._end}): pruning would never start."
                )
        self._epoch_start = self._step

    def on_train_batch_end(self, batch, logs=None):
        self._step = self._epoch_start + batch + 1
        update = self._update_step(self._step)
        masks = self.synced_masks()
        if update is not None and update != self._last_update:
            self._last_update = update
            self._prune_to(lambda initial: sparsity_at_step(
                update, self.target_sparsity, self.begin_step, self._end, initial
            ))
        else:
            masks.apply()
        self._log(logs)

    def on_train_end(self, logs=None):
        if self._rewind_weights is not None:
            self.model.set_weights(self._rewind_weights)
            self.masks.apply()

    def _update_step(self, step):
        """The last mask-update step at or before `step`; None before pruning starts."""
        if step < self.begin_step:
            return None
        if step >= self._end:
            return self._end
        return self.begin_step + (step - self.begin_step) // self.frequency * self.frequency

    def _prune_to(self, sparsity_from):
        """Prunes to `sparsity_from(initial sparsity)`, per kernel or over all of them."""
        if self.scope == "layer":
            counts = [
                int(round(sparsity_from(initial) * size))
                for initial, size in zip(self._initial_sparsities(), self.masks.sizes)
            ]
            self.masks.prune(counts)
        else:
            (initial,) = self._initial_sparsities()
            self.masks.prune_globally(int(round(sparsity_from(initial) * self.masks.total)))

    def _initial_sparsities(self):
        initial = getattr(self, "_initial", None)
        if initial is None:  # one-shot `prune`
            return self.masks.kernel_sparsities() if self.scope == "layer" else [self.masks.sparsity]
        return initial

    def _weights_to_rewind_to(self):
        if self.rewind_to is None:
            return self.model.get_weights()
        if isinstance(self.rewind_to, (str, os.PathLike)):
            weights = _saved_weights(self.model, os.fspath(self.rewind_to))
        else:
            weights = list(self.rewind_to)
        expected = self.model.get_weights()
        if len(weights) != len(expected) or any(
            np.shape(given) != np.shape(own) for given, own in zip(weights, expected)
        ):
            raise ValueError(
                f"`rewind_to` must be the model's weights as `model.get_weights()` gives them "
                f"({len(expected)} arrays of its shapes), got {len(weights)} arrays that do not fit."
            )
        return weights


def _saved_weights(model, path):
    """The model weights saved in a `.keras` file, or in a `.weights.h5` file of a model like `model`."""
    if path.endswith(".keras"):
        readable = check_keras_file(path)  # its sizes, before Keras reads them
        try:
            return keras.saving.load_model(readable, compile=False).get_weights()
        except TypeError as error:
            refusal = keras_loading_refusal(path, error)
            if refusal is None:
                raise
            raise refusal from None
    # Read into a copy, so that the model's own optimizer state stays as it is.
    copy = type(model).from_config(model.get_config())
    copy.load_weights(path)
    return copy.get_weights()


def _check_step(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer of at least {minimum}, got {value!r}.")


def _mark_pruned(model):
    # kbert's task models and Pretrainer keep `keep_sparsity` in their config.
    if hasattr(model, "keep_sparsity"):
        model.keep_sparsity = True
