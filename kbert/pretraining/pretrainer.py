"""BERT's pretraining model (masked LM and next-sentence prediction) and ALBERT's (sentence-order prediction)."""

import keras
import keras_hub

from kbert.backend import LayersBeforeInit, UntrackedStepState, compile_transformer_blocks
from kbert.backend.distribute import MultiWorkerFit, distributed_stream, model_strategy
from kbert.backend.model_inputs import known_steps
from kbert.backend.tensorflow_support import is_tf_dataset
from kbert.compression.keep_sparsity import with_sparsity_kept
from kbert.io.atomic_files import SavesAtomically
from kbert.models.constructor_config import ConstructorConfig
from kbert.models.encoder import Encoder, bert_initializer, gelu_approximate
from kbert.models.optimization import batches_trained, bert_adamw, start_schedule_window, with_loss_scaling
from kbert.models.task_model import FreezesUnusedPooler
from kbert.pretraining.sentence_pair_builder import resolve_objective

# NSP class ids: 0 when segment B really follows segment A, 1 when B is random.
NEXT_SENTENCE_LABELS = ("IsNext", "NotNext")
# SOP class ids: 0 when A and B are in the text's order, 1 when swapped.
SENTENCE_ORDER_LABELS = ("InOrder", "Swapped")


def default_pretraining_learning_rate(hidden_dim):
    """Peak pretraining learning rate: 1e-4 for BERT-base, higher for narrower encoders.

    BERT pretrained base and large at 1e-4 (Devlin et al., 2019). Narrower
    encoders are stable at, and need, larger rates, so the rate scales with
    the inverse of the width (768 / `hidden_dim`), capped at 1e-3.
    """
    return float(min(1e-4 * 768 / hidden_dim, 1e-3))


@keras.saving.register_keras_serializable(package="kbert")
class Pretrainer(
    SavesAtomically, UntrackedStepState, LayersBeforeInit, MultiWorkerFit, FreezesUnusedPooler, ConstructorConfig,
    keras.Model,
):
    """Pretrains a `kbert.Encoder` as BERT does (masked LM plus next-sentence prediction) or as ALBERT does (sentence order).

    Inputs are a dict of int32 tensors: the encoder's `token_ids`,
    `segment_ids` and `padding_mask`, all `(batch, sequence)`, and
    `mask_positions`, `(batch, predictions)`: the positions of the masked
    tokens to predict, padded with 0 where a sequence has fewer.

    Outputs are a dict of float32 logits (also under mixed precision):

    - `"mlm"`, `(batch, predictions, vocabulary_size)`: the masked-LM head
      reads the encoder's last hidden states at `mask_positions` through a
      dense layer to the embedding width (H to E for an ALBERT encoder), the
      encoder's GELU and LayerNorm, then projects onto the vocabulary with
      the transposed token embedding (tied weights) plus a bias;
    - `"nsp"`, `(batch, 2)`: a dense layer on the pooled `[CLS]` vector.
      Class 0 is `"IsNext"` (segment B follows A in the text), class 1 is
      `"NotNext"` (B is a random segment); see `NEXT_SENTENCE_LABELS`.
    - `"sop"`, `(batch, 2)`, instead of `"nsp"` with `objective="sop"`
      (ALBERT's sentence-order prediction): a dense layer of its own on the
      pooled vector. Class 0 is `"InOrder"` (A then B as in the text), class
      1 `"Swapped"`; see `SENTENCE_ORDER_LABELS`.

    With `objective="none"` (or `next_sentence=False`) there is only the
    `"mlm"` output (the MLM-only objective of RoBERTa); the encoder's pooler
    then gets no gradient, so it is left out of training and stays as
    initialised.

    `fit` takes batches of `(x, y, sample_weight)`, where `x` is the inputs
    dict, `y = {"mlm": original token ids at the masked positions (0 on
    padding), "nsp": NSP labels}` and `sample_weight = {"mlm": 1.0 for real
    predictions and 0.0 for padding, "nsp": ones}` (`"sop"` in place of
    `"nsp"` for SOP; only the `"mlm"` entries without a pair objective). Data
    made for another objective than the model's is refused with an error
    that names both.

    The model is compiled with BERT's recipe: AdamW (weight decay 0.01, none
    on biases and LayerNorm, gradients clipped to norm 1) with a learning
    rate that warms up over the first 10 % of each `fit` call's steps, then
    decays linearly to 0; the loss is the masked-LM cross-entropy averaged
    over the real masked positions plus the NSP (or SOP) cross-entropy.
    Logs are `loss`, `mlm_loss`, `nsp_loss`, `mlm_accuracy` (over real
    masked positions only) and `nsp_accuracy` (with SOP: `sop_loss` and
    `sop_accuracy`; without a pair objective: `loss`, the masked-LM loss,
    and `mlm_accuracy`). Call `compile` to change any of it.

    Args:
        encoder: a `kbert.Encoder`.
        next_sentence: the older switch of the objective: `True` is
            `objective="nsp"`, `False` is `objective="none"`.
        objective: `"nsp"` (the default), `"sop"` or `"none"`.
        keep_sparsity: whether the encoder is pruned (`kbert.MagnitudePruning`
            sets it): `fit` then keeps its pruned (zero) kernel weights at 0.

    Example:
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=30)
    >>> pretrainer = kbert.Pretrainer(encoder)
    >>> x = {
    ...     "token_ids": np.array([[2, 5, 4, 7, 3, 8, 4, 3], [2, 9, 4, 3, 6, 3, 0, 0]]),
    ...     "segment_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0, 0]]),
    ...     "padding_mask": np.array([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]]),
    ...     "mask_positions": np.array([[2, 6], [2, 0]]),
    ... }
    >>> y = {"mlm": np.array([[6, 9], [5, 0]]), "nsp": np.array([0, 1])}
    >>> weights = {"mlm": np.array([[1.0, 1.0], [1.0, 0.0]]), "nsp": np.ones(2)}
    >>> history = pretrainer.fit(x, y, sample_weight=weights, epochs=2, verbose=0)
    >>> sorted(history.history)
    ['loss', 'mlm_accuracy', 'mlm_loss', 'nsp_accuracy', 'nsp_loss']
    >>> outputs = pretrainer(x)
    >>> outputs["mlm"].shape, outputs["nsp"].shape
    (TensorShape([2, 2, 30]), TensorShape([2, 2]))
    >>> albert = kbert.Encoder.from_preset("albert-base", vocabulary_size=30, num_layers=2,
    ...                                    hidden_dim=16, num_heads=2, intermediate_dim=32,
    ...                                    embedding_size=8)
    >>> sop = kbert.Pretrainer(albert, objective="sop")
    >>> y = {"mlm": y["mlm"], "sop": np.array([0, 1])}
    >>> weights = {"mlm": weights["mlm"], "sop": np.ones(2)}
    >>> sorted(sop.fit(x, y, sample_weight=weights, verbose=0).history)
    ['loss', 'mlm_accuracy', 'mlm_loss', 'sop_accuracy', 'sop_loss']
    """

    # `kbert.callbacks.TensorBoard`'s name for the loss: its scale (about 6
    # to 10 early on) would flatten fine-tuning's (under 1) on a shared card.
    summary_loss_name = "pretraining_loss"

    @property
    def uses_pooler(self):
        # Only the pair head (NSP or SOP) reads the pooled [CLS] vector.
        return getattr(self, "objective", "not built yet") != "none"

    def __init__(self, encoder, next_sentence=None, name=None, objective=None, keep_sparsity=False,
                 **kwargs):
        objective = resolve_objective(objective, next_sentence)
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        if not isinstance(encoder, Encoder):
            raise TypeError(f"`encoder` must be a kbert.Encoder, got {type(encoder).__name__}.")
        policy = encoder.layer_dtype_policy

        # === Layers ===
        self.encoder = encoder
        self.masked_lm_head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=encoder.vocabulary_size,
            token_embedding=encoder.token_embedding,  # output projection tied to the input
            # The encoder's GELU: exact (erf) for BERT, the tanh form for ALBERT.
            intermediate_activation="gelu" if encoder.activation == "gelu" else gelu_approximate,
            layer_norm_epsilon=1e-12,
            kernel_initializer=bert_initializer(),
            dtype=policy,
            name="masked_lm_head",
        )
        # Float32 logits whatever the policy, for a stable softmax and loss.
        self.mlm_logits = keras.layers.Activation("linear", dtype="float32", name="mlm")
        self.next_sentence_head = None
        self.sentence_order_head = None
        if objective == "nsp":
            self.next_sentence_head = keras.layers.Dense(
                len(NEXT_SENTENCE_LABELS),
                kernel_initializer=bert_initializer(),
                dtype=policy,
                name="next_sentence_head",
            )
            self.nsp_logits = keras.layers.Activation("linear", dtype="float32", name="nsp")
        elif objective == "sop":
            self.sentence_order_head = keras.layers.Dense(
                len(SENTENCE_ORDER_LABELS),
                kernel_initializer=bert_initializer(),
                dtype=policy,
                name="sentence_order_head",
            )
            self.sop_logits = keras.layers.Activation("linear", dtype="float32", name="sop")

        # === Functional model ===
        inputs = dict(encoder.input)
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        encoded = encoder({key: inputs[key] for key in encoder.input})
        outputs = {
            "mlm": self.mlm_logits(
                self.masked_lm_head(encoded["sequence_output"], mask_positions=inputs["mask_positions"])
            )
        }
        if objective == "nsp":
            outputs["nsp"] = self.nsp_logits(self.next_sentence_head(encoded["pooled_output"]))
        elif objective == "sop":
            outputs["sop"] = self.sop_logits(self.sentence_order_head(encoded["pooled_output"]))
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        if encoder.lora is not None:
            # Keras set every layer trainable, the token embedding too through the
            # masked-LM head that holds it: LoRA's frozen weights are frozen again.
            encoder.freeze_for_lora()

        # === Config ===
        self.objective = objective
        self.next_sentence = objective == "nsp"
        self.keep_sparsity = bool(keep_sparsity)  # pruned: `fit` keeps the zero kernel weights
        self.compile()

    def compile(self, optimizer="auto", loss="auto", metrics="auto", learning_rate=None,
                gradient_accumulation_steps=None, **kwargs):
        """Compiles with BERT's pretraining defaults; any argument overrides them.

        Args:
            optimizer: `"auto"` for AdamW with warm-up and linear decay.
            loss: `"auto"` for the masked-LM cross-entropy, averaged over the
                masked positions whose sample weight is not 0, plus the NSP
                (or SOP) cross-entropy.
            metrics: `"auto"` for the accuracy of each head, weighted by the
                sample weights (so padded mask positions do not count); it
                sets `weighted_metrics` unless that is given.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default 1e-4 for BERT-base, more for narrower encoders (see
                `default_pretraining_learning_rate`), and ten times that with
                LoRA adapters (`enable_lora`), at most 5e-3.
            gradient_accumulation_steps: with the `"auto"` optimizer, update
                the weights every this many batches (at least 2), with the
                mean of their gradients: the update of a batch this many
                times as large, in the memory of one. Warm-up and decay count
                updates; `fit`, backups and resume count batches.
            **kwargs: `keras.Model.compile`'s other arguments; on PyTorch,
                `jit_compile=True` compiles the Transformer blocks, as
                `kbert.Classifier.compile` says.
        """
        if kwargs.get("jit_compile") is True and compile_transformer_blocks(self):
            kwargs["jit_compile"] = False
        if optimizer == "auto":
            if learning_rate is None:
                learning_rate = default_pretraining_learning_rate(self.encoder.hidden_dim)
                if self.encoder.lora is not None:
                    # Few adapters, starting at zero, want more (as `kbert.Classifier`'s with LoRA).
                    learning_rate = min(10 * learning_rate, 5e-3)
            optimizer = bert_adamw(
                learning_rate,
                gradient_accumulation_steps=gradient_accumulation_steps,
            )
        if loss == "auto":
            loss = {
                "mlm": keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight"
                )
            }
            if self.objective != "none":
                loss[self.objective] = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if metrics == "auto":
            metrics = None
            if kwargs.get("weighted_metrics") is None:
                # Keras prefixes metric names with the output's only when
                # there are several outputs; the log is `mlm_accuracy` either way.
                prefix = "" if len(self.output_names) > 1 else "mlm_"
                kwargs["weighted_metrics"] = {
                    name: [keras.metrics.SparseCategoricalAccuracy(name=prefix + "accuracy")]
                    for name in self.output_names
                }
        optimizer = with_loss_scaling(optimizer, self.encoder.layer_dtype_policy)
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def enable_lora(self, rank, targets=None, alpha=None):
        """Trains LoRA adapters of the encoder (`kbert.Encoder.enable_lora`) and the heads, then compiles again.

        Continued pretraining on a user's own text (domain adaptation) that
        keeps the encoder's weights as they are: the masked-LM head trains
        (its output embeddings are the frozen token embeddings), and so does
        the next-sentence head with the pooler. The default learning rate is
        ten times the pretraining one, at most 5e-3; call `compile` after
        this for settings of your own.
        """
        if getattr(self.optimizer, "built", False) and int(keras.ops.convert_to_numpy(self.optimizer.iterations)):
            raise ValueError("This pretrainer has been trained already: enable LoRA before fit.")
        self.encoder.enable_lora(rank, targets, alpha)
        self.compile()

    def compile_from_config(self, config):
        # Keras skips this for models that override `compile`; ours takes the
        # saved optimizer, loss and metrics as they are.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, *, steps_per_epoch=None,
            initial_epoch=0, callbacks=None, **kwargs):
        """Trains as `keras.Model.fit` does, with a fresh warm-up and decay for this call.

        `x` is typically a `kbert.pretraining_dataset` (batches of
        `(x, y, sample_weight)`, see the class docstring); other datasets and
        dicts of arrays work as well.

        A `tf.data.Dataset` (a `kbert.pretraining_dataset`, the same
        repeated, or any other) becomes one endless stream of epochs, of which
        each Keras epoch takes `steps_per_epoch` batches (default: one pass);
        a `kbert.pretraining_dataset` reshuffles its pairs and redraws its
        masks each pass. With a `kbert.callbacks.BackupAndRestore` among the
        callbacks, a run that was killed resumes at the exact batch after its
        last backup, with its learning-rate schedule and dropout state, and
        ends at the step an uninterrupted run ends at: both train the same
        steps on the same batches. A `kbert.pretraining_dataset` jumps to that
        batch; another dataset is read again up to it, so it must give the
        same batches every time it is read (fixed seeds), as it must for any
        exact resume. Arrays, and datasets of unknown length without
        `steps_per_epoch`, resume as plain Keras does, at the start of the
        interrupted epoch.
        """
        self._check_targets(x, y)
        callbacks = with_sparsity_kept(self, callbacks)
        backup = _find_backup(callbacks)
        position = backup.peek() if backup is not None else None
        stream, batches_per_pass = _batch_stream(x, batch_size)
        steps_per_epoch = steps_per_epoch or (batches_per_pass if stream is not None else None)
        if stream is None or steps_per_epoch is None or y is not None:
            # (A dataset with `y` is Keras' to refuse.)
            return self._fit_as_keras(x, y, batch_size, epochs, steps_per_epoch, initial_epoch,
                                      callbacks, position, **kwargs)

        first_step = batches_trained(self.optimizer)
        done = 0
        if position is not None:
            first_step = position["first_step"]
            done = position["step"] - first_step
            backup.set_batches_skipped(position["batches_done"])
        total = steps_per_epoch * max(epochs - initial_epoch, 0)
        start_schedule_window(self.optimizer, first_step, total)
        callbacks.append(_StopAtStep(first_step + total))
        kwargs.setdefault("shuffle", False)  # a stream reshuffles itself, if at all
        # The stream restarts at batch `done`: the rest of that pass, then
        # endless further passes.
        batches = distributed_stream(model_strategy(self), stream, done)
        return super().fit(batches, epochs=epochs, steps_per_epoch=steps_per_epoch,
                           initial_epoch=initial_epoch, callbacks=callbacks, **kwargs)

    def _check_targets(self, x, y):
        """Refuses data whose targets are not this model's outputs (NSP data for an SOP model)."""
        targets = y
        if targets is None and is_tf_dataset(x):
            spec = x.element_spec
            targets = spec[1] if isinstance(spec, tuple) and len(spec) >= 2 else None
        if not isinstance(targets, dict):
            return
        outputs, targets = set(self.output_names), set(targets)
        losses = self.loss if isinstance(self.loss, dict) else dict.fromkeys(outputs, True)
        unknown = targets - outputs
        missing = {name for name in outputs - targets if losses.get(name) is not None}
        if unknown or missing:
            pretraining_data = _pretraining_data(x)
            data = f"made for objective={pretraining_data.objective!r}, " if pretraining_data is not None else ""
            raise ValueError(
                f"The data ({data}targets {sorted(targets)}) does not fit this Pretrainer "
                f"(objective={self.objective!r}, outputs {sorted(outputs)}): make the data with "
                f"the Pretrainer's objective (kbert.pretraining_dataset(..., objective="
                f"{self.objective!r})), or build the Pretrainer with the data's."
            )

    def _fit_as_keras(self, x, y, batch_size, epochs, steps_per_epoch, initial_epoch, callbacks,
                      position, **kwargs):
        """Keras' own `fit`, with the schedule and the last step of the whole run.

        Without a backup, the warm-up and decay fit the steps `fit` will run:
        `steps_per_epoch` or the data's batches (unknown for a dataset of
        unknown length: the schedule then keeps its peak after warm-up). A
        resumed run keeps the window of the run it continues, and stops at
        its last step.
        """
        steps = steps_per_epoch or known_steps(x, batch_size)
        total = None if steps is None else steps * max(epochs - initial_epoch, 0)
        first_step = batches_trained(self.optimizer)
        if position is not None:
            first_step = position["first_step"]
        start_schedule_window(self.optimizer, first_step, total)
        if total is not None:
            callbacks = callbacks + [_StopAtStep(first_step + total)]
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           steps_per_epoch=steps_per_epoch, initial_epoch=initial_epoch,
                           callbacks=callbacks, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update({
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "objective": self.objective,
            "keep_sparsity": self.keep_sparsity,
        })
        return config


def _find_backup(callbacks):
    """The first callback that restores a position inside an epoch (`kbert.callbacks.BackupAndRestore`)."""
    backups = [c for c in callbacks or [] if hasattr(c, "peek") and hasattr(c, "set_batches_skipped")]
    return backups[0] if backups else None


class _StopAtStep(keras.callbacks.Callback):
    """Ends a resumed run at the step an uninterrupted one would end at.

    A resumed run's first epoch starts mid-way through the data, so its
    epochs end a few batches later than the original's; the last one is cut
    short here so both train exactly the same steps.
    """

    batches_trained = None

    def __init__(self, last_step):
        super().__init__()
        self.last_step = last_step

    def on_train_batch_end(self, batch, logs=None):
        # Read once, then counted: reading the model at every batch is host
        # work between two steps on JAX (see `kbert.callbacks.TrainingStepCallback`).
        if self.batches_trained is None:
            self.batches_trained = batches_trained(self.model.optimizer)
        else:
            self.batches_trained += 1
        if self.batches_trained >= self.last_step:
            self.model.stop_training = True


def _batch_stream(x, batch_size):
    """`(stream, batches_per_pass)` for a dataset; `(None, None)` for other data.

    `stream(start)` is the dataset's endless sequence of batches from batch
    `start` on; `batches_per_pass` is `None` when the length is unknown. A
    `kbert.PretrainingData`, or the same `.repeat()`-ed, has a stream
    that numbers its passes in the graph and jumps to any batch; another
    dataset is repeated and read up to `start`, so every pass after the
    first is read as a new iteration of the dataset, just as an
    uninterrupted run reads it.
    """
    if not is_tf_dataset(x):
        return None, None
    pretraining_data = _pretraining_data(x)
    if pretraining_data is not None and pretraining_data.stream is not None:
        passes = known_steps(pretraining_data, batch_size)
        if passes is not None:
            return pretraining_data.stream, passes
    batches_per_pass = known_steps(x, batch_size)

    def stream(start=0):
        # Reading the skipped batches, rather than jumping over them, keeps
        # per-iteration randomness (a reshuffling `shuffle`) in step.
        return x.repeat().skip(int(start))

    return stream, batches_per_pass


def _pretraining_data(x):
    """The `kbert.PretrainingData` that `x` is, or that `x` repeats; None for other data."""
    if not is_tf_dataset(x):
        return None
    import tensorflow as tf

    # Imported here: a `tf.data.Dataset` means TensorFlow is installed, which models need not be.
    from kbert.pretraining.pretraining_data import PretrainingData

    if not isinstance(x, PretrainingData) and int(x.cardinality()) == tf.data.INFINITE_CARDINALITY:
        # `.repeat()` makes a plain dataset: look below it.
        x = getattr(x, "_input_dataset", None)
    return x if isinstance(x, PretrainingData) else None
