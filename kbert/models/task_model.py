"""Base class of kbert's task models: Keras models that take raw text."""

import warnings

import keras
import numpy as np

from kbert.backend import LayersBeforeInit, UntrackedStepState, compile_transformer_blocks
from kbert.backend.distribute import MultiWorkerFit, agreed_seed, is_multi_worker, model_strategy
from kbert.backend.model_inputs import is_packed, is_token_ids, known_steps, one_iterator
from kbert.backend.tensorflow_support import is_tf_dataset, require_tensorflow
from kbert.compression.keep_sparsity import with_sparsity_kept
from kbert.io.atomic_files import SavesAtomically
from kbert.io.progress_bar import progress_bar
from kbert.models.constructor_config import ConstructorConfig
from kbert.models.encoder import Encoder, bert_initializer
from kbert.models.optimization import (
    batches_trained,
    bert_adamw,
    default_learning_rate,
    start_schedule_window,
    with_loss_scaling,
)


class FreezesUnusedPooler:
    """Mixin for models on an encoder: when `uses_pooler` is False, the pooler is not trained.

    Models whose outputs do not come from the pooled `[CLS]` vector would
    give the pooler no gradient (Keras warns about every step); its weights
    count as non-trainable instead, and stay as they are.
    """

    uses_pooler = True

    def _is_pooler(self, weight):
        return not self.uses_pooler and any(weight is p for p in self.encoder.pooler_dense.weights)

    @property
    def trainable_weights(self):
        return [w for w in super().trainable_weights if not self._is_pooler(w)]

    @property
    def trainable_variables(self):
        return [v for v in super().trainable_variables if not self._is_pooler(v)]

    @property
    def non_trainable_weights(self):
        frozen = [w for w in super().trainable_weights if self._is_pooler(w)]
        return super().non_trainable_weights + frozen

    @property
    def non_trainable_variables(self):
        frozen = [v for v in super().trainable_variables if self._is_pooler(v)]
        return super().non_trainable_variables + frozen


class TaskModel(
    SavesAtomically, UntrackedStepState, LayersBeforeInit, MultiWorkerFit, FreezesUnusedPooler, ConstructorConfig,
    keras.Model,
):
    """A functional Keras model on a `kbert.Encoder`, with its task preprocessor attached.

    The model itself sees token ids only; its `preprocessor` (a task
    preprocessor, e.g. `kbert.ClassifierPreprocessor`) owns the task's
    settings and does the forward step (raw inputs to model inputs and
    targets) and the reverse one (outputs to labels, tags, answers).
    `fit`, `evaluate` and `predict` take what the task takes (texts, text
    pairs, sentences of words, question records) or a `tf.data.Dataset` of
    it, and run it through `kbert.data.task_dataset`.

    They also take token ids, as Keras does: a dict of `token_ids`,
    `segment_ids` and `padding_mask` arrays, or any iterable of batches of
    them (a generator, a `keras.utils.PyDataset`, a PyTorch `DataLoader`).
    A model built without a preprocessor (`preprocessor=None`: where
    TensorFlow, which the preprocessors run on, is not installed) takes
    only those, and keeps its head's settings (`num_classes`, ...) itself.

    One contract for every task:

    - `predict(x)` keeps Keras' contract: the model's scores (logits) as
      NumPy, one entry per example given; for the tagger and the question
      answerer, whose model rows are windows, a list with one array (or
      dict) per sentence or question;
    - `predict_proba(x)` is the softmax of those scores;
    - a named method gives the task's answers: `classify`, `choose`,
      `tag`, `answer`, `embed`; `evaluate_report` gives the metrics the
      task's community reports.

    `keep_sparsity=True` marks a pruned model (`kbert.MagnitudePruning` sets
    it): its `fit` then keeps the encoder's pruned (zero) kernel weights at 0.

    Subclasses build the functional graph and call
    `super().__init__(inputs=..., outputs=..., preprocessor=...)`.
    """

    def __init__(self, *args, preprocessor=None, keep_sparsity=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.preprocessor = preprocessor
        self.keep_sparsity = bool(keep_sparsity)

    @property
    def text_pairs(self):
        """Whether the model reads text pairs (None until it has seen texts); its preprocessor's."""
        return None if self.preprocessor is None else self.preprocessor.text_pairs

    @text_pairs.setter
    def text_pairs(self, value):
        self._raw_input_preprocessor().text_pairs = None if value is None else bool(value)

    def call(self, inputs, training=None, mask=None):
        # A packed batch (several examples to a row) takes the task's own
        # forward pass; its outputs are one per example, as unpacked.
        if is_packed(inputs):
            return self.packed_call(inputs, training=training)
        return super().call(inputs, training=training, mask=mask)

    def _assert_input_compatibility(self, *args):
        # Packed rows are `(rows, width)` whatever the unpacked inputs'
        # shape (multiple choice's is `(batch, choices, length)`):
        # `packed_call` reads them.
        if args and is_packed(args[0]):
            return
        super()._assert_input_compatibility(*args)

    def packed_call(self, inputs, training=None):
        """The model's outputs, one per example, for a packed batch (`kbert.preprocessing.packing`)."""
        raise ValueError(f"A {type(self).__name__} does not train on packed batches; fit it with packing=False.")

    def compile(self, optimizer="auto", loss="auto", metrics="auto", learning_rate=None, **kwargs):
        """Compiles with BERT's fine-tuning defaults; any argument overrides them.

        Args:
            optimizer: `"auto"` for AdamW (weight decay 0.01, none on biases
                and LayerNorm, gradients clipped to norm 1) with warm-up and
                linear decay.
            loss: `"auto"` for the task's loss (see the model's docstring).
            metrics: `"auto"` for the task's metrics.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default 5e-5 for BERT-base, more for smaller encoders, and
                75 times that with LoRA adapters, at most 5e-3
                (`enable_lora`).
            **kwargs: `keras.Model.compile`'s other arguments. On PyTorch,
                `jit_compile=True` compiles each Transformer block with
                `torch.compile` (one program that every block shares) and
                runs the rest of the step eagerly, where Keras would put the
                whole step through `torch.compile` (over 150 s for BERT-base).
        """
        if kwargs.get("jit_compile") is True and compile_transformer_blocks(self):
            kwargs["jit_compile"] = False
        if optimizer == "auto":
            if learning_rate is None:
                learning_rate = default_learning_rate(self.encoder.hidden_dim, lora=self.encoder.lora is not None)
            optimizer = bert_adamw(learning_rate)
        if loss == "auto":
            loss = self.default_loss()
        if metrics == "auto":
            metrics = self.default_metrics(kwargs)
        optimizer = with_loss_scaling(optimizer, self.encoder.layer_dtype_policy)
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def default_loss(self):
        """The `"auto"` loss: sparse categorical cross-entropy on logits."""
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self, compile_kwargs):
        """The `"auto"` metrics: accuracy. May set other `compile` arguments."""
        return [keras.metrics.SparseCategoricalAccuracy("accuracy")]

    def fit(
        self,
        x=None,
        y=None,
        batch_size=None,
        epochs=1,
        validation_data=None,
        sample_weight=None,
        shuffle=True,
        steps_per_epoch=None,
        initial_epoch=0,
        packing=False,
        **kwargs,
    ):
        """Keras' `fit`, on raw inputs too; `packing=True` packs several examples to a row (not embeddings).

        Packed batches (`kbert.data.task_dataset`) hold `batch_size`
        examples each, as unpacked ones do, with less padding to compute:
        the same steps, losses and metrics, each example computed as if it
        were alone.
        """
        if is_token_ids(x):
            data = dict(x=x, y=y, batch_size=batch_size, sample_weight=sample_weight, shuffle=shuffle)
        else:
            dataset = self.training_dataset(x, y, sample_weight, batch_size, shuffle=shuffle, packing=packing)
            data = dict(x=dataset, shuffle=False)  # `task_dataset` shuffles the examples itself.
        if validation_data is not None:
            validation_data = self._validation_dataset(validation_data, batch_size)
        steps = steps_per_epoch or known_steps(data["x"], batch_size)
        self._start_learning_rate_window(steps, epochs - initial_epoch)
        data["x"], steps_per_epoch = one_iterator(data["x"], steps_per_epoch)
        if validation_data is not None:
            validation_data, kwargs["validation_steps"] = one_iterator(validation_data,
                                                                       kwargs.get("validation_steps"))
        kwargs["callbacks"] = with_sparsity_kept(self, kwargs.get("callbacks"))
        return super().fit(
            **data,
            epochs=epochs,
            validation_data=validation_data,
            steps_per_epoch=steps_per_epoch,
            initial_epoch=initial_epoch,
            **kwargs,
        )

    def training_dataset(self, x, y=None, sample_weight=None, batch_size=None, shuffle=True, packing=False):
        """The batches `fit` trains on: `kbert.data.task_dataset` of the inputs.

        Under several workers every worker shuffles with the chief's seed, so
        that they read the same batches and each takes its own part of them.
        """
        strategy = model_strategy(self)
        if packing and (getattr(strategy, "num_replicas_in_sync", 1) > 1 or keras.distribution.distribution()):
            # Replicas split a batch along its first axis: a packed batch's
            # rows and its examples' [CLS] positions would part ways.
            raise ValueError("packing=True trains on one device: a packed batch's rows cannot be split between "
                             "replicas; train with packing=False under a distribution strategy.")
        seed = agreed_seed(strategy) if shuffle and is_multi_worker(strategy) else None
        return self._task_dataset(x, y, sample_weight, batch_size, shuffle=shuffle, seed=seed, packing=packing)

    def _task_dataset(self, x, y=None, sample_weight=None, batch_size=None, **kwargs):
        """`kbert.data.task_dataset` of raw inputs (TensorFlow, and this model's preprocessor)."""
        check_batch_size(batch_size)
        if _is_empty(x):
            raise ValueError("Got no examples: the input is empty.")
        require_tensorflow("Raw-text input (tf.data and the TF-Text preprocessor)")
        from kbert.preprocessing.input_pipeline import task_dataset

        if self.preprocessor is None and not is_tf_dataset(x):
            self._raw_input_preprocessor()
        return task_dataset(self.preprocessor, x, y, sample_weight, batch_size, **kwargs)

    def _raw_input_preprocessor(self):
        """The preprocessor, or a clear error for a model built without one."""
        if self.preprocessor is None:
            raise ValueError(
                f"This {type(self).__name__} has no preprocessor, so it takes token ids only (a dict "
                "of token_ids, segment_ids and padding_mask, or batches of them); build it with a "
                "task preprocessor (kbert.classifier(...), ...) to give it raw text."
            )
        return self.preprocessor

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, packing=False, **kwargs):
        """Keras' `evaluate`, on raw inputs too; `packing=True` packs several examples to a row (see `fit`)."""
        if is_token_ids(x):
            return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)
        dataset, kwargs["steps"] = one_iterator(self._task_dataset(x, y, sample_weight, batch_size, packing=packing),
                                                kwargs.get("steps"))
        return super().evaluate(dataset, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """The model's scores for `x` (any input `fit` takes, labels left out), as NumPy."""
        if is_token_ids(x):
            return super().predict(x, batch_size=batch_size, **kwargs)
        dataset, kwargs["steps"] = one_iterator(self._task_dataset(x, batch_size=batch_size),
                                                kwargs.get("steps"))
        return super().predict(dataset, **kwargs)

    def predict_proba(self, x, batch_size=None, **kwargs):
        """The softmax of `predict`'s logits, one row per example."""
        return softmax(self.predict(x, batch_size=batch_size, **kwargs))

    def _validation_dataset(self, validation_data, batch_size):
        if is_token_ids(validation_data):
            return validation_data
        if is_tf_dataset(validation_data):
            return self._task_dataset(validation_data, batch_size=batch_size)
        if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
            raise ValueError(
                "`validation_data` must be (inputs, targets), (inputs, targets, weights), a "
                "tf.data.Dataset, or batches of token ids."
            )
        if is_token_ids(validation_data[0]):
            return tuple(validation_data)
        return self._task_dataset(*validation_data, batch_size=batch_size)

    def _start_learning_rate_window(self, steps, epochs):
        """Fits each `fit` call's warm-up and decay to the steps it will run (`None`: unknown)."""
        total = None if steps is None else steps * max(epochs, 1)
        start_schedule_window(self.optimizer, batches_trained(self.optimizer), total)

    def _map_batches(self, function, batches, verbose):
        """Runs `function` (a `tf.function` of TF tensors) on each batch, with a progress bar; NumPy results."""
        batches = list(batches)
        show = verbose not in (0, False) and len(batches) > (1 if verbose == "auto" else 0)
        progress = progress_bar(len(batches)) if show else None
        results = []
        for step, batch in enumerate(batches):
            output = function(*batch) if isinstance(batch, tuple) else function(batch)
            results.append(keras.tree.map_structure(np.asarray, output))
            if progress is not None:
                progress.update(step + 1)
        return results

    def enable_lora(self, rank, targets=None, alpha=None):
        """Fine-tunes LoRA adapters (Hu et al., 2021) instead of the whole encoder, then compiles as the builder does.

        The encoder is frozen but for its pooler and the adapters of each
        block's `targets` projections (`kbert.Encoder.enable_lora`); the
        task's head trains as before. A step computes no gradient for the
        frozen kernels and the optimizer keeps state for the trained
        variables alone. The model is compiled again with the task's
        defaults, whose learning rate is LoRA's (75 times full
        fine-tuning's: `kbert.models.optimization.default_learning_rate`);
        call `compile` after this for settings of your own. `save_adapter`
        writes what was trained apart from the encoder; `kbert.export`
        merges the adapters into the kernels.

        Args:
            rank: the adapters' rank; 8 is the LoRA paper's for BERT-sized
                models.
            targets: the projections with adapters, of "query", "key",
                "value", "attention_output", "intermediate" and "output",
                or "all" of them; default query and value.
            alpha: the update's scale is `alpha / rank`; default `rank`.

        Example:
        >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40,
        ...                                verbose=False)
        >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16, num_layers=2)
        >>> clf.enable_lora(4)
        >>> sum(int(np.prod(v.shape)) for v in clf.trainable_variables) < clf.count_params() // 10
        True
        """
        if getattr(self.optimizer, "built", False) and int(keras.ops.convert_to_numpy(self.optimizer.iterations)):
            raise ValueError("This model has been trained already: enable LoRA on the model before fit.")
        self.encoder.enable_lora(rank, targets, alpha)
        self.compile()

    def merge_lora(self):
        """A copy of this model with its LoRA adapters folded into the kernels: the same outputs, a plain encoder.

        What `kbert.export` serves: the same graph, size and speed as a fully
        fine-tuned model's. The copy shares this model's preprocessor.
        """
        if self.encoder.lora is None:
            return self
        config = self.get_config()
        config["encoder"] = self.encoder.merged_lora()
        config["preprocessor"] = self.preprocessor
        merged = type(self).from_config(config)
        encoder_variables = {id(variable) for variable in self.encoder.weights}
        merged_encoder_variables = {id(variable) for variable in merged.encoder.weights}
        others = [variable for variable in self.weights if id(variable) not in encoder_variables]
        for target, source in zip([v for v in merged.weights if id(v) not in merged_encoder_variables], others,
                                  strict=True):
            # A copy: on JAX a variable assigned another's array shares its buffer, which a step may donate.
            target.assign(keras.ops.convert_to_numpy(source))
        return merged

    def save_adapter(self, path, base_name=None):
        """Writes what LoRA fine-tuning trained, apart from the frozen encoder, to `path`; returns the path.

        The file holds the adapters, the pooler and the task's head, the
        model's config (preprocessor and vocabulary included), and the base
        encoder's name and weights' fingerprint: about 1 % of the whole
        model for BERT-base at rank 8. `kbert.load_adapter(path, base=...)`
        builds the model again on that base, and refuses any other. See
        `kbert.models.adapter_file`.

        Args:
            path: the file to write (atomically: a complete file or none).
            base_name: the base encoder's name or path, recorded in the
                file; default the checkpoint the model was built from
                (`kbert.classifier("all-MiniLM-L6-v2", ...)`), if any.
                `load_adapter` finds a base by a name it knows
                ("all-MiniLM-L6-v2"); a path it reads only when given as
                `base`.
        """
        from kbert.models.adapter_file import write_adapter

        name = base_name if base_name is not None else getattr(self.encoder, "base_name", None)
        return write_adapter(self, path, base_name=name)

    def compile_from_config(self, config):
        # Keras skips this for models that override `compile`; ours takes the
        # saved optimizer, loss and metrics as they are.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def get_config(self):
        config = super().get_config()
        config.update({
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
            "keep_sparsity": self.keep_sparsity,
        })
        return config


def encoder_and_preprocessor(encoder, preprocessor, preprocessor_class, **settings):
    """A task's encoder and its task preprocessor, deserialized and checked to fit the encoder.

    `preprocessor` is the task's preprocessor (which holds the settings:
    any given must equal its own), or a plain `kbert.TextPacker`, wrapped into
    `preprocessor_class()(preprocessor, **settings)` (settings left None take
    their defaults), or None: a model of token ids alone, whose settings
    are its own (see `head_setting`). `preprocessor_class` gives the task
    preprocessor's class when called: the preprocessors run on TensorFlow,
    imported only for a model that has one.
    """
    if isinstance(encoder, dict):
        encoder = keras.saving.deserialize_keras_object(encoder)
    if not isinstance(encoder, Encoder):
        raise TypeError(f"`encoder` must be a kbert.Encoder, got {type(encoder).__name__}.")
    if preprocessor is None:
        return encoder, None
    what = preprocessor.get("class_name", "preprocessor") if isinstance(preprocessor, dict) else "preprocessor"
    require_tensorflow(f"The model's {what} (TF-Text)")
    from kbert.preprocessing.text_packer import TextPacker

    preprocessor_class = preprocessor_class()
    if isinstance(preprocessor, dict):
        preprocessor = keras.saving.deserialize_keras_object(preprocessor)
    given = {name: value for name, value in settings.items() if value is not None}
    if isinstance(preprocessor, TextPacker):
        preprocessor = preprocessor_class(preprocessor, **given)
    elif isinstance(preprocessor, preprocessor_class):
        differ = sorted(name for name, value in given.items() if not _same(getattr(preprocessor, name), value))
        if differ:
            raise ValueError(
                f"{differ} differ from the {preprocessor_class.__name__}'s own; set them there, or "
                "pass a plain kbert.TextPacker."
            )
    else:
        raise TypeError(
            f"`preprocessor` must be a kbert.{preprocessor_class.__name__}, a kbert.TextPacker or "
            f"None, got {type(preprocessor).__name__}."
        )
    check_compatible(encoder, preprocessor)
    return encoder, preprocessor


def check_batch_size(batch_size):
    """A batch size: None (the default) or a positive integer."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                   or batch_size < 1):
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")


def _is_empty(x):
    """Whether raw input holds no example: `[]`, or a tuple of empty lists."""
    if isinstance(x, tuple):
        return bool(x) and all(_is_empty(part) for part in x)
    return isinstance(x, (list, np.ndarray)) and len(x) == 0


def head_setting(preprocessor, name, value):
    """A task setting (`num_classes`, ...): the preprocessor's, or for a model without one `value`, which must be given."""
    if preprocessor is not None:
        return getattr(preprocessor, name)
    if value is None:
        raise ValueError(f"`{name}` is needed to build a model without a preprocessor.")
    return value


def _same(a, b):
    sequence = (list, tuple)
    return list(a) == list(b) if isinstance(a, sequence) and isinstance(b, sequence) else a == b


def check_compatible(encoder, preprocessor):
    """Fails clearly when a preprocessor cannot feed an encoder."""
    vocabulary_size = preprocessor.tokenizer.vocabulary_size()
    if vocabulary_size != encoder.vocabulary_size:
        raise ValueError(
            f"The tokenizer has {vocabulary_size} tokens but the encoder embeds "
            f"{encoder.vocabulary_size}; use the vocabulary the encoder was built for."
        )
    if preprocessor.sequence_length > encoder.max_sequence_length:
        raise ValueError(
            f"`sequence_length` {preprocessor.sequence_length} exceeds the encoder's "
            f"`max_sequence_length` {encoder.max_sequence_length}."
        )


def output_head(encoder, units, name, dropout=None):
    """A task head on encoder outputs: dropout (when given) and a dense layer of `units` logits.

    Both compute in the encoder's dtype policy, initialised as BERT's layers.
    """
    dense = keras.layers.Dense(
        units, kernel_initializer=bert_initializer(), dtype=encoder.layer_dtype_policy, name=name
    )
    if dropout is None:
        return dense
    dropout_layer = keras.layers.Dropout(dropout, dtype=encoder.layer_dtype_policy, name="output_dropout")
    return dropout_layer, dense


def softmax(logits):
    """A numerically stable softmax over the last axis of NumPy logits (float64 inside)."""
    logits = np.asarray(logits, "float64")
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True, initial=-np.inf))
    return (exp / exp.sum(axis=-1, keepdims=True)).astype("float32")


def deprecated(old, new):
    warnings.warn(f"`{old}` is deprecated; use `{new}`.", DeprecationWarning, stacklevel=3)
