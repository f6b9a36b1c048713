"""Layer-wise (TinyBERT) distillation: a student encoder learns the inner states of a teacher's."""

import keras

from kbert.backend import UntrackedStepState, build_before_first_step
from kbert.backend.model_inputs import known_steps, one_iterator
from kbert.compression.layer_mapping import (
    attention_mean_squared_error,
    check_layer_map,
    encoder_states,
    masked_mean_squared_error,
)
from kbert.io.atomic_files import SavesAtomically
from kbert.models.constructor_config import ConstructorConfig
from kbert.models.encoder import Encoder, bert_initializer
from kbert.models.optimization import (
    batches_trained,
    bert_adamw,
    default_learning_rate,
    start_schedule_window,
    with_loss_scaling,
)

# The loss parts, in the order they are logged; each is on when its argument is.
PARTS = ("embedding_loss", "hidden_loss", "attention_loss")


@keras.saving.register_keras_serializable(package="kbert")
class LayerwiseDistiller(SavesAtomically, UntrackedStepState, ConstructorConfig, keras.Model):
    """Trains a student encoder to compute what a teacher encoder computes, layer by layer.

    TinyBERT's Transformer distillation (Jiao et al., 2020): on raw text
    (no labels), the student's embeddings, layer outputs and attention
    maps are fitted to the teacher's by mean squared error. With `S` the
    student and `T` the teacher, `g(m)` the teacher layer student layer
    `m` learns from (`layer_map`), and MSE a mean over the real tokens
    (padding left out):

    - `embedding_loss = MSE(E_S W_e, E_T)`, `E` the embedding output (the
      first block's input);
    - `hidden_loss = sum_m MSE(H_S,m W_h, H_T,g(m))`, `H` a layer's output;
    - `attention_loss = sum_m MSE(A_S,m, A_T,g(m))`, `A` a layer's
      attention probabilities, over pairs of real query and key tokens,
      head by head with equal head counts; with different counts (a
      12-head teacher, a 4-head student) each side's maps are averaged over
      its heads first;
    - `loss` is the sum of the parts switched on.

    TinyBERT fits the attention scores before the softmax; the
    probabilities are used here, as they are comparable across models
    whatever the scale of their scores. `W_e` and `W_h` are learned linear
    projections from the student's width to the teacher's (one for the
    embeddings, one shared by all layers), initialised as BERT's weights,
    and exist only when the widths differ; they are trained with the
    student but are not part of it.

    The default `layer_map` is TinyBERT's uniform one: student layer `m`
    of `M` learns from teacher layer `(m + 1) * N // M - 1` of `N` (a
    6-layer teacher and a 3-layer student: 1, 3, 5).

    The teacher runs in inference mode and is never trained; the student
    trains with dropout. `fit` takes raw texts (general distillation on a
    corpus, e.g. `kbert.pretraining.documents.text_lines`, or task-specific
    distillation on the task's texts) and logs `loss` and each part, so
    TensorBoard draws them as separate curves. Afterwards `student` is the
    trained `kbert.Encoder`: build a task model on it, or distil a task
    model into one with prediction-layer distillation. The distiller
    round-trips through `get_config` and `.keras` files (teacher, student,
    projections); the student is what is usually worth saving.

    Args:
        teacher: a `kbert.Encoder`, or a task model (its `encoder` is used).
        student: a `kbert.Encoder`, or a task model (its `encoder` is
            trained); same vocabulary as the teacher.
        preprocessor: a `kbert.TextPacker` that packs the texts for both
            encoders; default the packer of the teacher task model (or else
            of the student task model). Required for two bare encoders.
        layer_map: for each student layer, the 0-based teacher layer it
            learns from; default uniform.
        embeddings: whether to fit the embedding output.
        hidden_states: whether to fit the layer outputs.
        attention: whether to fit the attention maps.

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat", "a dog ran"] * 10, vocabulary_size=40,
    ...                                verbose=False)
    >>> teacher = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> student = kbert.Encoder.from_preset("tiny", vocabulary_size=len(vocab), num_layers=1,
    ...                                     hidden_dim=64)
    >>> distiller = kbert.LayerwiseDistiller(teacher, student)
    >>> distiller.layer_map, tuple(distiller.hidden_projection.kernel.shape)
    ((1,), (64, 128))
    >>> history = distiller.fit(["the cat sat", "a dog ran", "the dog sat"], batch_size=2, verbose=0)
    >>> sorted(history.history)
    ['attention_loss', 'embedding_loss', 'hidden_loss', 'loss']
    >>> distiller.student is student
    True
    """

    # `kbert.callbacks.TensorBoard`'s name for the loss: a sum of squared
    # errors, on no common scale with a task's loss beside it.
    summary_loss_name = "layerwise_loss"

    def __init__(self, teacher, student, preprocessor=None, layer_map=None, embeddings=True,
                 hidden_states=True, attention=True, **kwargs):
        super().__init__(**kwargs)
        teacher, teacher_tokenizer, teacher_packer = _encoder_parts(teacher, "teacher")
        student, student_tokenizer, student_packer = _encoder_parts(student, "student")
        if isinstance(preprocessor, dict):
            preprocessor = keras.saving.deserialize_keras_object(preprocessor)
        preprocessor = _packer(preprocessor, teacher_packer, student_packer)
        if not (embeddings or hidden_states or attention):
            raise ValueError(
                "`embeddings`, `hidden_states` and `attention` are all False: nothing to distil; "
                "switch at least one on."
            )
        _check_vocabularies(teacher, student, preprocessor, teacher_tokenizer, student_tokenizer)
        self.layer_map = check_layer_map(layer_map, teacher.num_layers, student.num_layers)

        # === Layers ===
        self.teacher = teacher
        self.student = student
        self.preprocessor = preprocessor
        # Width projections: W_e for the embeddings, W_h shared by the layers.
        widths_differ = student.hidden_dim != teacher.hidden_dim
        self.embedding_projection = (
            self._projection("embedding_projection") if widths_differ and embeddings else None
        )
        self.hidden_projection = (
            self._projection("hidden_projection") if widths_differ and hidden_states else None
        )
        self.built = True

        # === Config ===
        self.embeddings = bool(embeddings)
        self.hidden_states = bool(hidden_states)
        self.attention = bool(attention)
        self.loss_trackers = {
            name: keras.metrics.Mean(name=name) for name in ("loss", *self.parts)
        }

    def _projection(self, name):
        projection = keras.layers.Dense(
            self.teacher.hidden_dim,
            kernel_initializer=bert_initializer(),
            dtype=self.student.layer_dtype_policy,
            name=name,
        )
        projection.build((None, None, self.student.hidden_dim))
        return projection

    @property
    def parts(self):
        """The names of the loss parts switched on, as logged."""
        on = (self.embeddings, self.hidden_states, self.attention)
        return tuple(name for name, is_on in zip(PARTS, on) if is_on)

    # --- What trains: the student (not its pooler) and the projections ---------

    def _is_frozen(self, variable):
        frozen = [*self.teacher.weights, *self._unused_student_weights()]
        return any(variable is weight for weight in frozen)

    def _unused_student_weights(self):
        """The student's weights that no loss part switched on depends on: they are left as they are.

        The pooler always; with attention maps but not layer outputs, what
        the last layer computes after its attention probabilities (values,
        attention output, feed-forward, LayerNorms), unless an earlier layer
        shares that block; with the embeddings alone, every block.
        """
        student = self.student
        unused = list(student.pooler_dense.weights)
        if not (self.hidden_states or self.attention):
            unused += [w for block in student.transformer_layers for w in block.weights]
        elif self.attention and not self.hidden_states:
            last = student.layer_blocks[-1][-1]
            earlier = [block for blocks in student.layer_blocks[:-1] for block in blocks]
            earlier += student.layer_blocks[-1][:-1]
            if not any(block is last for block in earlier):
                attention = last.self_attention_layer
                for layer in (attention.value_dense, attention.output_dense, last.self_attention_layer_norm,
                              last.feedforward_intermediate_dense, last.feedforward_output_dense,
                              last.feedforward_layer_norm):
                    unused += layer.weights
        return unused

    @property
    def trainable_weights(self):
        return [w for w in super().trainable_weights if not self._is_frozen(w)]

    @property
    def trainable_variables(self):
        return self.trainable_weights

    @property
    def non_trainable_weights(self):
        frozen = [w for w in super().trainable_weights if self._is_frozen(w)]
        return super().non_trainable_weights + frozen

    @property
    def non_trainable_variables(self):
        return self.non_trainable_weights

    # --- The losses ------------------------------------------------------------

    def compute_loss_parts(self, inputs, training=False):
        """`{part: scalar}` for one batch of model inputs: each part switched on, and `loss`.

        Args:
            inputs: a dict of `token_ids`, `segment_ids` and `padding_mask`.
            training: whether the student runs in training mode (dropout).
        """
        padding_mask = inputs["padding_mask"]
        teacher = encoder_states(self.teacher, inputs, training=False, attention=self.attention)
        teacher = keras.tree.map_structure(keras.ops.stop_gradient, teacher)
        student = encoder_states(self.student, inputs, training=training, attention=self.attention)
        parts = {}
        if self.embeddings:
            parts["embedding_loss"] = masked_mean_squared_error(
                _project(self.embedding_projection, student["embeddings"]),
                teacher["embeddings"],
                padding_mask,
            )
        if self.hidden_states:
            parts["hidden_loss"] = sum(
                masked_mean_squared_error(
                    _project(self.hidden_projection, student["hidden_states"][m]),
                    teacher["hidden_states"][t],
                    padding_mask,
                )
                for m, t in enumerate(self.layer_map)
            )
        if self.attention:
            parts["attention_loss"] = sum(
                attention_mean_squared_error(
                    student["attention_scores"][m], teacher["attention_scores"][t], padding_mask
                )
                for m, t in enumerate(self.layer_map)
            )
        return {"loss": sum(parts.values()), **parts}

    def call(self, inputs, training=False):
        return self.compute_loss_parts(inputs, training=training)

    @property
    def metrics(self):
        return list(self.loss_trackers.values())

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The sum of the loss parts (`y_pred`, what `call` gives); updates each part's log."""
        inputs = x[0] if isinstance(x, tuple) else x
        batch = keras.ops.shape(inputs["token_ids"])[0]
        for name, value in y_pred.items():
            self.loss_trackers[name].update_state(value, sample_weight=batch)
        loss = y_pred["loss"]
        for regularization in self.losses:
            loss = loss + keras.ops.cast(keras.ops.sum(regularization), loss.dtype)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return {name: tracker.result() for name, tracker in self.loss_trackers.items()}

    # --- Compile, fit, evaluate ------------------------------------------------

    def compile(self, optimizer="auto", learning_rate=None, **kwargs):
        """Compiles with BERT's optimiser; no loss to give, the distiller has its own.

        Args:
            optimizer: `"auto"` for AdamW (weight decay 0.01, none on biases
                and LayerNorm, gradients clipped to norm 1) with warm-up and
                linear decay over each `fit`; or any Keras optimizer.
            learning_rate: the peak learning rate of the `"auto"` optimizer;
                default that of fine-tuning the student's width
                (`kbert.models.optimization.default_learning_rate`).
        """
        if optimizer == "auto":
            optimizer = bert_adamw(default_learning_rate(self.student.hidden_dim) if learning_rate is None
                                   else learning_rate)
        super().compile(optimizer=with_loss_scaling(optimizer, self.student.layer_dtype_policy), **kwargs)

    def compile_from_config(self, config):
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def text_dataset(self, x, batch_size=32, shuffle=False):
        """Batches of packed model inputs from raw texts, as `fit` and `evaluate` read them.

        `x` is a list of texts, a `(texts_a, texts_b)` pair of lists, or a
        `tf.data.Dataset` of texts (or pairs; batched or not, finite or
        not). Lists are shuffled (with `shuffle`) and grouped by length;
        every batch is padded to its longest text, as the task models'
        `kbert.data.task_dataset` does.
        """
        from kbert.preprocessing.input_pipeline import task_dataset
        from kbert.preprocessing.task_preprocessor import TaskPreprocessor

        return task_dataset(TaskPreprocessor(self.preprocessor), x, batch_size=batch_size,
                            shuffle=shuffle)

    def fit(self, x=None, batch_size=32, epochs=1, steps_per_epoch=None, validation_data=None,
            initial_epoch=0, **kwargs):
        """Distils on raw texts (no labels); see `text_dataset` for what `x` may be.

        Compiles with the defaults first if `compile` was not called. With
        an endless dataset, give `steps_per_epoch`. `validation_data` takes
        texts too. Other arguments go to `keras.Model.fit`.
        """
        if "y" in kwargs:
            raise TypeError("LayerwiseDistiller.fit takes texts only, no labels (`y`).")
        if x is None:
            raise ValueError("`x` must be texts, a (texts_a, texts_b) pair or a tf.data.Dataset.")
        if not self.compiled:
            self.compile()
        dataset = self.text_dataset(x, batch_size, shuffle=kwargs.pop("shuffle", True))
        if validation_data is not None:
            validation_data = self.text_dataset(validation_data, batch_size)
        steps = steps_per_epoch or known_steps(dataset, batch_size)
        total = None if steps is None else steps * max(epochs - initial_epoch, 1)
        start_schedule_window(self.optimizer, batches_trained(self.optimizer), total)
        build_before_first_step(self, dataset)
        dataset, steps_per_epoch = one_iterator(dataset, steps_per_epoch)
        if validation_data is not None:
            validation_data, kwargs["validation_steps"] = one_iterator(validation_data,
                                                                       kwargs.get("validation_steps"))
        return super().fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                           validation_data=validation_data, initial_epoch=initial_epoch,
                           shuffle=False, **kwargs)

    def evaluate(self, x=None, batch_size=32, **kwargs):
        """The loss parts on raw texts, the student in inference mode."""
        if not self.compiled:
            self.compile()
        dataset, kwargs["steps"] = one_iterator(self.text_dataset(x, batch_size), kwargs.get("steps"))
        return super().evaluate(dataset, **kwargs)

    # --- Config ----------------------------------------------------------------

    def get_config(self):
        config = super().get_config()
        config.update({
            "teacher": keras.saving.serialize_keras_object(self.teacher),
            "student": keras.saving.serialize_keras_object(self.student),
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
            "layer_map": list(self.layer_map),
            "embeddings": self.embeddings,
            "hidden_states": self.hidden_states,
            "attention": self.attention,
        })
        return config


def _project(projection, states):
    return states if projection is None else projection(states)


def _encoder_parts(model, role):
    """`(encoder, tokenizer or None, packer or None)` of an encoder or a task model."""
    if isinstance(model, dict):
        model = keras.saving.deserialize_keras_object(model)
    if isinstance(model, Encoder):
        return model, None, None
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, Encoder):
        raise TypeError(
            f"`{role}` must be a kbert.Encoder or a kbert task model, got {type(model).__name__}."
        )
    packer = getattr(getattr(model, "preprocessor", None), "packer", None)
    return encoder, getattr(packer, "tokenizer", None), packer


def _packer(preprocessor, teacher_packer, student_packer):
    from kbert.preprocessing.text_packer import TextPacker

    if preprocessor is None:
        preprocessor = teacher_packer if teacher_packer is not None else student_packer
        if preprocessor is None:
            raise ValueError(
                "Both the teacher and the student are bare encoders: pass `preprocessor`, a "
                "kbert.TextPacker (tokenizer and sequence_length) to pack the texts."
            )
    preprocessor = getattr(preprocessor, "packer", preprocessor)  # a task preprocessor's
    if not isinstance(preprocessor, TextPacker):
        raise TypeError(
            f"`preprocessor` must be a kbert.TextPacker, got {type(preprocessor).__name__}."
        )
    return preprocessor


def _check_vocabularies(teacher, student, preprocessor, teacher_tokenizer, student_tokenizer):
    from kbert.models.task_model import check_compatible

    if teacher.vocabulary_size != student.vocabulary_size:
        raise ValueError(
            f"The teacher embeds {teacher.vocabulary_size} tokens but the student "
            f"{student.vocabulary_size}: layer-wise distillation needs the same vocabulary."
        )
    given = preprocessor.tokenizer.get_vocabulary()
    for role, tokenizer in [("teacher", teacher_tokenizer), ("student", student_tokenizer)]:
        if tokenizer is not None and tokenizer.get_vocabulary() != given:
            other = tokenizer.get_vocabulary()
            first = next(
                (i for i, (a, b) in enumerate(zip(given, other)) if a != b), min(len(given), len(other))
            )
            raise ValueError(
                f"The {role}'s vocabulary differs from the one the texts are packed with (first "
                f"at id {first}: {_token(other, first)} vs {_token(given, first)}): layer-wise "
                "distillation needs one vocabulary for both models."
            )
    for role, encoder in [("teacher", teacher), ("student", student)]:
        try:
            check_compatible(encoder, preprocessor)
        except ValueError as error:
            raise ValueError(f"The {role}: {error}") from None


def _token(vocabulary, index):
    return repr(vocabulary[index]) if index < len(vocabulary) else "(none)"
