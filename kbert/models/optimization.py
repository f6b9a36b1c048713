"""BERT's fine-tuning optimiser: AdamW with linear warm-up, then linear decay."""

import math
import numbers

import keras
import numpy as np
from keras import ops

from kbert.backend import AdamW


@keras.saving.register_keras_serializable(package="kbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Rises linearly from 0 to `peak_learning_rate`, then falls linearly to 0.

    The schedule runs over a window of optimizer steps that `set_window`
    moves (kbert's `fit` does so at its start), so every `fit` call gets its
    own warm-up and decay, also after a model is saved, loaded and trained
    again. Steps past the window keep the final learning rate, 0. With
    gradient accumulation (`steps_per_update` batches per update), the
    window counts updates: the rate of an update is that of the same update
    made from one large batch.

    The window lives in three variables (`variables`), so a new window takes
    effect without compiling the training step again; `start_schedule_window`
    makes them part of the optimizer's state, which is how a compiled JAX
    step sees them change.

    Args:
        peak_learning_rate: the learning rate at the end of the warm-up.
        total_steps: steps in the window; `None` keeps the peak after warm-up.
        warmup_fraction: the share of the window spent warming up.
    """

    def __init__(self, peak_learning_rate, total_steps=None, warmup_fraction=0.1, start_step=0,
                 steps_per_update=1):
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_fraction = float(warmup_fraction)
        with keras.name_scope("warmup_linear_decay"):
            self._start = _window_variable("start")
            self._total = _window_variable("total")
            self._per_update = _window_variable("per_update", 1)
        self.set_window(start_step, total_steps, steps_per_update)

    @property
    def variables(self):
        """The window: its first step, its length in updates (-1: none) and batches per update."""
        return [self._start, self._total, self._per_update]

    def set_window(self, start_step, total_steps, steps_per_update=1):
        """Starts a warm-up/decay cycle of `total_steps` batches at batch `start_step`.

        With `steps_per_update` > 1 (gradient accumulation) the cycle is
        `total_steps / steps_per_update` updates long.
        """
        per_update = max(int(steps_per_update or 1), 1)
        total = -1 if total_steps is None else max(-(-int(total_steps) // per_update), 1)
        # Kept on the host as well: `get_config` must not read variables that
        # a distribution strategy may hold on other devices or workers.
        self._window = (int(start_step), total, per_update)
        for variable, value in zip(self.variables, self._window):
            variable.assign(value)

    def __call__(self, step):
        step = ops.floor_divide(ops.cast(step, "int32") - self._start.value, self._per_update.value)
        step = ops.cast(step, "float32")
        total = ops.cast(self._total.value, "float32")
        constant = total < 0
        total = ops.where(constant, 1.0, total)
        warmup = ops.where(constant, 0.0, ops.ceil(total * self.warmup_fraction))
        rise = (step + 1.0) / ops.maximum(warmup, 1.0)
        fall = (total - step) / ops.maximum(total - warmup, 1.0)
        fraction = ops.where(step < warmup, rise, ops.where(constant, 1.0, fall))
        return self.peak_learning_rate * ops.clip(fraction, 0.0, 1.0)

    def rate_at(self, step, window=None):
        """`self(step)` computed on the host, in float32 as the backend does, as a Python float.

        `window` is `(start, total, per_update)` as the variables hold it;
        default the one `set_window` last set.
        """
        start, total, per_update = self._window if window is None else window
        one = np.float32(1.0)
        step = np.float32((int(step) - start) // per_update)
        if total < 0:
            return float(np.float32(self.peak_learning_rate) * np.clip(step + one, 0, 1).astype("float32"))
        total = np.float32(total)
        warmup = np.ceil(total * np.float32(self.warmup_fraction))
        if step < warmup:
            fraction = (step + one) / max(warmup, one)
        else:
            fraction = (total - step) / max(total - warmup, one)
        return float(np.float32(self.peak_learning_rate) * np.float32(np.clip(fraction, 0, 1)))

    def get_config(self):
        start, total, per_update = self._window
        config = {
            "peak_learning_rate": self.peak_learning_rate,
            "total_steps": None if total < 0 else total * per_update,
            "warmup_fraction": self.warmup_fraction,
            "start_step": start,
        }
        if per_update > 1:
            config["steps_per_update"] = per_update
        return config


def _window_variable(name, value=0):
    # int32 on every backend (JAX has no int64 by default): 2 ** 31 steps.
    return keras.Variable(value, dtype="int32", trainable=False, name=name,
                          aggregation="only_first_replica")


def track_schedule(optimizer):
    """Makes the window of the optimizer's `WarmupLinearDecay` part of its state (`optimizer.variables`).

    A compiled JAX step reads the optimizer's variables as inputs, so a
    window moved by `set_window` reaches it; a variable read from outside
    would be fixed into the step when it compiles. Returns the schedule, or
    None when the learning rate is not a `WarmupLinearDecay`.
    """
    optimizer = inner_optimizer(optimizer)
    schedule = getattr(optimizer, "_learning_rate", None)
    if not isinstance(schedule, WarmupLinearDecay):
        return None
    tracked = {id(variable) for variable in optimizer.variables}
    for variable in schedule.variables:
        if id(variable) not in tracked:
            optimizer._track_variable(variable)
    return schedule


def start_schedule_window(optimizer, start_step, total_steps):
    """Starts a new warm-up/decay cycle if the optimizer's rate is a `WarmupLinearDecay`.

    Other learning rates (a float, another schedule) are left as they are.
    """
    schedule = track_schedule(optimizer)
    if schedule is not None:
        schedule.set_window(start_step, total_steps, inner_optimizer(optimizer).gradient_accumulation_steps)


def batches_trained(optimizer):
    """The batches an optimizer has taken: its `iterations`, or with gradient accumulation the batches
    accumulated (Keras' `iterations` then counts the updates)."""
    optimizer = inner_optimizer(optimizer)
    counter = getattr(optimizer, "_iterations", None) if optimizer.gradient_accumulation_steps else None
    return int(keras.ops.convert_to_numpy(optimizer.iterations if counter is None else counter))


@keras.saving.register_keras_serializable(package="kbert")
class BertAdamW(AdamW):
    """AdamW as BERT fine-tunes: no weight decay on biases and LayerNorm.

    A class of its own so the exclusions survive `.keras` save and load.
    Defaults: weight decay 0.01, epsilon 1e-6, gradients clipped to global
    norm 1.0. Its update is the backend's fastest form of keras' AdamW
    (`kbert.backend.AdamW`): the same formula on every backend.

    A `WarmupLinearDecay` learning rate's window is part of the optimizer's
    variables (`track_schedule`) but not of what it saves: the schedule's
    config carries it, and files saved before it was a variable load as
    they are.
    """

    def __init__(self, learning_rate=5e-5, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0,
                 **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, epsilon=epsilon,
                         global_clipnorm=global_clipnorm, **kwargs)
        self.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        track_schedule(self)

    def _saved_variables(self):
        schedule = getattr(self._learning_rate, "variables", [])
        return [v for v in self.variables if not any(v is w for w in schedule)]

    def save_own_variables(self, store):
        for i, variable in enumerate(self._saved_variables()):
            store[str(i)] = variable.numpy()

    def load_own_variables(self, store):
        variables = self._saved_variables()
        if len(store.keys()) != len(variables):
            # keras' own message and behaviour: the state is not loaded.
            return super().load_own_variables(store)
        for i, variable in enumerate(variables):
            variable.assign(store[str(i)])


def bert_adamw(learning_rate, weight_decay=0.01, gradient_accumulation_steps=None):
    """BERT's fine-tuning optimiser with a `WarmupLinearDecay` schedule.

    With `gradient_accumulation_steps=n`, the weights are updated every `n`
    batches with the mean of their gradients: the update of one batch `n`
    times as large, in the memory of one (`None` or 1: every batch).
    """
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real) or not (
            math.isfinite(learning_rate) and learning_rate > 0):
        # A negative rate trains by gradient ascent, NaN gives a NaN model: neither fails by itself.
        raise ValueError(f"`learning_rate` must be a finite number above 0, got {learning_rate!r}.")
    if gradient_accumulation_steps is not None and int(gradient_accumulation_steps) < 1:
        raise ValueError("`gradient_accumulation_steps` must be a positive integer or None, got "
                         f"{gradient_accumulation_steps!r}.")
    accumulation = int(gradient_accumulation_steps) if gradient_accumulation_steps else 1
    return BertAdamW(learning_rate=WarmupLinearDecay(learning_rate), weight_decay=weight_decay,
                     gradient_accumulation_steps=accumulation if accumulation > 1 else None)


def inner_optimizer(optimizer):
    """The optimizer that updates the weights: `optimizer`, or the one a `LossScaleOptimizer` wraps."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def with_loss_scaling(optimizer, dtype_policy):
    """`optimizer`, in a `keras.optimizers.LossScaleOptimizer` for a model that computes in float16.

    Under `mixed_float16` small gradients round to zero unless the loss is
    scaled up before differentiation (and the gradients down after); Keras
    does it for a model whose own policy is `mixed_float16`, but a kbert
    model's policy is its layers' (`Encoder.layer_dtype_policy`). bfloat16
    has float32's range and needs no scaling.
    """
    name = getattr(dtype_policy, "name", dtype_policy)
    if name != "mixed_float16" or isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.get(optimizer))


def default_learning_rate(hidden_dim, lora=False):
    """Peak fine-tuning learning rate: 5e-5 for BERT-base, higher for smaller encoders; 75 times that with LoRA.

    Small BERTs fine-tune best at larger rates (Turc et al., 2019, searched
    1e-4 to 3e-5); the rate scales with the inverse square root of the width.
    LoRA adapters, which start at zero and are few, want a far higher rate:
    Hu et al. (2021) trained RoBERTa-base's at 4e-4 to 5e-4 for 30 to 80
    epochs; for the few epochs of a small data set, all-MiniLM-L6-v2's
    adapters learned most at 5e-3, of 7e-4, 2e-3, 2.8e-3 and 5e-3
    (benchmarks/README.rst, "LoRA"), so the rate is 75 times full
    fine-tuning's (5e-3 for all-MiniLM-L6-v2, 3.75e-3 for BERT-base), at
    most 5e-3.
    """
    rate = min(5e-5 * (768 / hidden_dim) ** 0.5, 2e-4)
    return float(min(rate * 75, 5e-3) if lora else rate)
