"""Layer-wise distillation's pieces: which teacher layer each student layer learns from, the states
an encoder computes on the way, and the masked mean squared errors between them."""

import numbers

import keras


def uniform_layer_map(teacher_layers, student_layers):
    """The teacher layer (0-based) each student layer learns from, spread evenly (TinyBERT's rule).

    Student layer `m` (of `M`) learns from teacher layer `(m + 1) * N // M - 1`
    (of `N`): every `N / M`-th teacher layer, ending at the teacher's last, so
    the student's last layer imitates the teacher's output.

    Example:
    >>> uniform_layer_map(6, 3), uniform_layer_map(12, 4), uniform_layer_map(4, 4)
    ((1, 3, 5), (2, 5, 8, 11), (0, 1, 2, 3))
    """
    for name, value in [("teacher_layers", teacher_layers), ("student_layers", student_layers)]:
        if not _is_integer(value) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    if student_layers > teacher_layers:
        raise ValueError(
            f"A student of {student_layers} layers is deeper than its teacher of {teacher_layers}: "
            "the uniform map needs a student no deeper than the teacher; pass a `layer_map`."
        )
    return tuple((m + 1) * teacher_layers // student_layers - 1 for m in range(student_layers))


def check_layer_map(layer_map, teacher_layers, student_layers):
    """`layer_map` as a tuple of ints, checked: one 0-based teacher layer per student layer.

    `None` gives `uniform_layer_map(teacher_layers, student_layers)`.

    Example:
    >>> check_layer_map([0, 2], teacher_layers=3, student_layers=2)
    (0, 2)
    >>> check_layer_map([0, 3], teacher_layers=3, student_layers=2)
    Traceback (most recent call last):
    ...
    ValueError: `layer_map` entry 1 is 3, outside the teacher's layers 0 to 2.
    """
    if layer_map is None:
        return uniform_layer_map(teacher_layers, student_layers)
    if isinstance(layer_map, (str, bytes)) or not hasattr(layer_map, "__len__"):
        raise TypeError(f"`layer_map` must be a list of teacher layer indices, got {layer_map!r}.")
    layer_map = list(layer_map)
    if len(layer_map) != student_layers:
        raise ValueError(
            f"`layer_map` must give one teacher layer per student layer ({student_layers}), got "
            f"{len(layer_map)}: {layer_map}."
        )
    for m, index in enumerate(layer_map):
        if not _is_integer(index):
            raise TypeError(f"`layer_map` entry {m} must be an integer layer index, got {index!r}.")
        if not 0 <= index < teacher_layers:
            raise ValueError(
                f"`layer_map` entry {m} is {index}, outside the teacher's layers 0 to "
                f"{teacher_layers - 1}."
            )
    return tuple(int(index) for index in layer_map)


def _is_integer(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def encoder_states(encoder, inputs, training=None, attention=True):
    """What a `kbert.Encoder` computes on the way to its output, as differentiable tensors.

    The encoder runs block by block, as its own graph does, each keras-hub
    `TransformerEncoder` asked for its attention probabilities as well
    (`kbert.callbacks.attention_map_logger.attention_scores` does the same
    in NumPy, for pictures). Works eagerly and inside a `tf.function`, and
    gradients flow through every tensor returned.

    Args:
        encoder: a `kbert.Encoder`.
        inputs: a dict of `token_ids`, `segment_ids` and `padding_mask`.
        training: the mode to run in (dropout).
        attention: whether to return the attention maps.

    Returns:
        A dict: `embeddings`, the first block's input `(batch, sequence,
        hidden_dim)`; `hidden_states`, a list with each layer's output (the
        encoder's `encoder_outputs`); `attention_scores` (with `attention`),
        a list with each layer's attention probabilities `(batch, heads,
        query, key)`, those of its last block for ALBERT groups of several.

    Example:
    >>> encoder = kbert.Encoder.from_preset("tiny", vocabulary_size=10)
    >>> inputs = {"token_ids": np.array([[2, 5, 6, 3]]), "segment_ids": np.zeros((1, 4), "int32"),
    ...           "padding_mask": np.ones((1, 4), "int32")}
    >>> states = encoder_states(encoder, inputs)
    >>> states["embeddings"].shape, len(states["hidden_states"]), states["attention_scores"][0].shape
    (TensorShape([1, 4, 128]), 2, TensorShape([1, 2, 4, 4]))
    """
    token_ids = keras.ops.convert_to_tensor(inputs["token_ids"], "int32")
    segment_ids = keras.ops.convert_to_tensor(inputs["segment_ids"], "int32")
    padding_mask = keras.ops.convert_to_tensor(inputs["padding_mask"], "int32")
    x = encoder.embed(token_ids, segment_ids, training=training)
    states = {"embeddings": x, "hidden_states": []}
    if attention:
        states["attention_scores"] = []
    for blocks in encoder.layer_blocks:
        for block in blocks:
            if attention:
                x, scores = block(x, padding_mask=padding_mask, training=training,
                                  return_attention_scores=True)
            else:
                x = block(x, padding_mask=padding_mask, training=training)
        states["hidden_states"].append(x)
        if attention:
            states["attention_scores"].append(scores)
    return states


def masked_mean_squared_error(student, teacher, padding_mask):
    """The mean squared difference of two `(batch, sequence, width)` tensors over real tokens.

    Padding positions (`padding_mask` 0) are left out: the mean is over the
    real tokens and every feature, in float32.

    Example:
    >>> student = np.array([[[1.0, 1.0], [3.0, 0.0], [9.0, 9.0]]])
    >>> teacher = np.zeros((1, 3, 2))
    >>> float(masked_mean_squared_error(student, teacher, np.array([[1, 1, 0]])))
    2.75
    """
    student = keras.ops.cast(student, "float32")
    teacher = keras.ops.cast(teacher, "float32")
    mask = keras.ops.cast(padding_mask, "float32")[:, :, None]
    squares = keras.ops.square(student - teacher) * mask
    count = keras.ops.sum(mask) * keras.ops.cast(keras.ops.shape(student)[-1], "float32")
    return keras.ops.sum(squares) / keras.ops.maximum(count, 1.0)


def attention_mean_squared_error(student_scores, teacher_scores, padding_mask):
    """The mean squared difference of two attention maps over real query and key positions.

    Maps are `(batch, heads, query, key)` probabilities. With equal head
    counts, head `h` of the student is compared with head `h` of the
    teacher; with different counts (e.g. 4 and 12), each side's maps are
    first averaged over its heads, and the averages are compared. The mean
    runs over the pairs of real tokens (`padding_mask` 1) and the heads
    compared, in float32.

    Example:
    >>> student = np.full((1, 2, 2, 2), 0.5)
    >>> teacher = np.array([[[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]]])
    >>> float(attention_mean_squared_error(student, teacher, np.ones((1, 2))))
    0.25
    >>> float(attention_mean_squared_error(student[:, :1], teacher, np.ones((1, 2))))  # head means
    0.0
    """
    student_scores = keras.ops.cast(student_scores, "float32")
    teacher_scores = keras.ops.cast(teacher_scores, "float32")
    if student_scores.shape[1] != teacher_scores.shape[1]:
        student_scores = keras.ops.mean(student_scores, axis=1, keepdims=True)
        teacher_scores = keras.ops.mean(teacher_scores, axis=1, keepdims=True)
    mask = keras.ops.cast(padding_mask, "float32")
    pairs = mask[:, None, :, None] * mask[:, None, None, :]
    squares = keras.ops.square(student_scores - teacher_scores) * pairs
    heads = keras.ops.cast(keras.ops.shape(student_scores)[1], "float32")
    return keras.ops.sum(squares) / keras.ops.maximum(keras.ops.sum(pairs) * heads, 1.0)
