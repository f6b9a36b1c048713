"""Shared test harnesses: the checks every layer, preprocessor and task passes."""

import contextlib
import os

import keras
import numpy as np
import tensorflow as tf

# The Keras backend of this test run (`make test` runs the suite on TensorFlow,
# then the tests marked `all_backends` on JAX and on PyTorch).
BACKEND = keras.config.backend()

TINY_VOCABULARY = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "a", "cat", "dog", "sat", "on", "mat", "good", "bad", "film",
    "free", "prize", "now", "see", "you", "soon", "##s", "##ing", ".", ",", "!", "?",
]  # fmt: skip


# The encoder families every task must accept: BERT, and ALBERT (E < H, one shared block).
ARCHITECTURES = ("bert", "albert")


def tiny_encoder_kwargs(vocabulary_size=len(TINY_VOCABULARY), architecture="bert"):
    kwargs = {
        "vocabulary_size": vocabulary_size,
        "num_layers": 2,
        "hidden_dim": 16,
        "num_heads": 2,
        "intermediate_dim": 32,
        "max_sequence_length": 32,
    }
    if architecture == "albert":
        kwargs.update(embedding_size=8, num_groups=1, activation="gelu_approximate")
    elif architecture != "bert":
        raise ValueError(f"Unknown architecture {architecture!r}; tests know {ARCHITECTURES}.")
    return kwargs


def numpy(tensor):
    """A tensor or variable of any backend (or TensorFlow's), or a number or list, as a NumPy array."""
    if isinstance(tensor, (tf.Tensor, np.ndarray, list, tuple, int, float)):
        return np.asarray(tensor)
    return np.asarray(keras.ops.convert_to_numpy(tensor))


def assert_allclose(actual, desired, **kwargs):
    """`np.testing.assert_allclose` of tensors of any backend."""
    np.testing.assert_allclose(numpy(actual), numpy(desired), **kwargs)


def assert_array_equal(actual, desired):
    """`np.testing.assert_array_equal` of tensors of any backend."""
    np.testing.assert_array_equal(numpy(actual), numpy(desired))


def dtype(tensor):
    """A tensor's dtype by name ("float32", "bfloat16", ...), whatever its backend."""
    return keras.backend.standardize_dtype(tensor.dtype)


def to_numpy(value):
    def leaf(v):
        if isinstance(v, tf.RaggedTensor):
            return v.to_list()
        if isinstance(v, (tf.Tensor, np.ndarray, str, bytes, int, float)):
            return np.asarray(v)
        return numpy(v)  # a JAX or PyTorch tensor

    return keras.tree.map_structure(leaf, value)


def assert_all_close(a, b, atol=1e-6):
    keras.tree.assert_same_structure(a, b)
    for x, y in zip(keras.tree.flatten(to_numpy(a)), keras.tree.flatten(to_numpy(b))):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind in "OSU":  # strings: equal, not close
            assert np.array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, atol=atol)


def run_config_round_trip(layer, inputs):
    """`from_config(get_config())` builds an equal layer: same config, same output."""
    config = layer.get_config()
    restored = layer.__class__.from_config(config)
    assert restored.get_config() == config
    if restored.weights:
        restored.set_weights(layer.get_weights())
    assert_all_close(layer(inputs), restored(inputs))
    return restored


def _call(layer, inputs):
    return layer(inputs)


def run_layer_test(layer, inputs, call=_call):
    """The checks every kbert layer passes (keras-hub's layer harness): returns its eager outputs.

    - it builds and runs eagerly, and symbolically on `keras.Input`s of the
      same shapes (batch left open), giving outputs of the same structure,
      shapes and dtypes;
    - a training step reaches every trainable variable: the gradient of the
      sum of its float outputs is finite, and not all zero, for each one;
    - it serializes (`keras.saving.serialize_keras_object`) and comes back
      with the same config and, given its weights, the same outputs.

    `call(layer, inputs)` calls it (default `layer(inputs)`); `inputs` is any
    structure of arrays with a batch axis.
    """
    from kbert.backend import gradient_function

    eager = call(layer, inputs)
    symbolic_inputs = keras.tree.map_structure(
        lambda array: keras.Input(shape=tuple(array.shape[1:]), dtype=dtype(keras.ops.convert_to_tensor(array))),
        inputs)
    symbolic = call(layer, symbolic_inputs)
    keras.tree.assert_same_structure(eager, symbolic)
    for got, expected in zip(keras.tree.flatten(symbolic), keras.tree.flatten(eager)):
        assert tuple(got.shape[1:]) == tuple(expected.shape[1:]) and dtype(got) == dtype(expected)

    def loss():
        outputs = keras.tree.flatten(call(layer, inputs))
        return sum(keras.ops.sum(keras.ops.cast(output, "float32")) for output in outputs
                   if "float" in dtype(output))

    variables = layer.trainable_variables
    assert variables, "the layer has nothing to train"
    gradients = gradient_function(loss, variables)()
    for variable, gradient in zip(variables, gradients):
        assert gradient is not None, f"no gradient reaches {variable.path}"
        values = numpy(gradient)
        assert np.isfinite(values).all() and np.abs(values).max() > 0, f"no gradient reaches {variable.path}"

    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer) and restored.get_config() == layer.get_config()
    call(restored, inputs)  # built
    restored.set_weights(layer.get_weights())
    assert_all_close(call(restored, inputs), eager, atol=1e-5)
    return eager


def run_precision_test(make, inputs, call=_call, float32_outputs=(), atol=0.1):
    """The checks every kbert layer passes under mixed precision (keras-hub's precision harness).

    `make(dtype)` builds the layer for a dtype policy. Under
    "mixed_bfloat16" its variables stay float32, it computes in bfloat16 (each
    output is bfloat16 but those named in `float32_outputs`, such as logits),
    its outputs are finite and within `atol` of float32's on the same
    weights, and its config brings the policy back (the restored layer
    computes the same bfloat16 outputs).
    """
    reference, mixed = make("float32"), make("mixed_bfloat16")
    expected = call(reference, inputs)
    call(mixed, inputs)  # built
    mixed.set_weights(reference.get_weights())
    assert all(dtype(variable) == "float32" for variable in mixed.weights)
    outputs = call(mixed, inputs)
    paths = [path for path, _ in keras.tree.flatten_with_path(outputs)]
    for path, got, want in zip(paths, keras.tree.flatten(outputs), keras.tree.flatten(expected)):
        if "float" not in dtype(want):
            continue
        kind = "float32" if path and path[0] in float32_outputs else "bfloat16"
        assert dtype(got) == kind, (path, dtype(got))
        got = numpy(keras.ops.cast(got, "float32"))
        assert np.isfinite(got).all(), path
        np.testing.assert_allclose(got, numpy(want), atol=atol, err_msg=str(path))
    restored = type(mixed).from_config(mixed.get_config())
    call(restored, inputs)
    restored.set_weights(mixed.get_weights())
    again = call(restored, inputs)
    assert [dtype(t) for t in keras.tree.flatten(again)] == [dtype(t) for t in keras.tree.flatten(outputs)]
    as_float32 = lambda tensors: [numpy(keras.ops.cast(t, "float32")) for t in keras.tree.flatten(tensors)]  # noqa: E731
    assert_all_close(as_float32(again), as_float32(outputs), atol=1e-6)
    return outputs


def run_preprocessing_equivalence(layer, inputs):
    """A preprocessing layer gives the same output eagerly, in `tf.data` and in a `tf.function`."""
    direct = layer(inputs)
    dataset = tf.data.Dataset.from_tensors(inputs).map(layer)
    in_data = next(iter(dataset))
    assert_all_close(direct, in_data)
    traced = tf.function(layer)(inputs)
    assert_all_close(direct, traced)
    return direct


def run_task_test(model, x, y, tmp_path, batch_size=2, dataset=None, request=None, predict_x=None,
                  trains=True):
    """The checks every task model passes, whatever its inputs.

    - it fits on raw inputs (`x`, `y`) and, when given, on a `tf.data`
      `dataset` of raw examples, with a finite loss;
    - the forward step run eagerly, `model.preprocessor(x, y)`, equals what
      `kbert.data.task_dataset` gives in `tf.data` (one batch of all of it);
    - it predicts (on `predict_x`, default `x`), and a `.keras` save and
      load gives the same predictions and the same preprocessor config;
    - its export serves `request` (serving_default's raw inputs) with the
      same answers as the task preprocessor's `serve` on the live model.
      On JAX and PyTorch, where the model runs outside TensorFlow's graph,
      `serve` on the live model and on the loaded one agree instead (the
      export of such a model is tested in tests/backend).

    A model that is not trained (an embedder: `trains=False`) skips `fit`.
    Returns `(restored, predictions)`.
    """
    import kbert
    from kbert.preprocessing.input_pipeline import cut_padding

    if trains:
        history = model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
    if dataset is not None:
        history = model.fit(dataset, batch_size=batch_size, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])

    # Preprocessing outside the model equals inside: eager and tf.data.
    eager = model.preprocessor(x, y)
    if model.preprocessor.pads_to_longest:
        eager = cut_padding(*eager) if isinstance(eager, tuple) else cut_padding(eager)
    (in_data,) = list(kbert.data.task_dataset(model.preprocessor, x, y, batch_size=10_000))
    assert_all_close(eager, in_data)

    predict_x = x if predict_x is None else predict_x
    predictions = model.predict(predict_x, batch_size=batch_size, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is type(model)
    assert restored.preprocessor.get_config() == model.preprocessor.get_config()
    assert_all_close(restored.predict(predict_x, batch_size=batch_size, verbose=0), predictions, atol=1e-5)

    if request is not None:
        texts = [tf.constant(request[name]) for name, _ in model.preprocessor.serving_inputs()]
        expected = model.preprocessor.serve(model, *texts)
        if BACKEND == "tensorflow":
            exported = tf.saved_model.load(kbert.export(model, os.path.join(tmp_path, "export")))
            served = exported.signatures["serving_default"](**{k: tf.constant(v) for k, v in request.items()})
        else:
            served = restored.preprocessor.serve(restored, *texts)
        assert sorted(served) == sorted(expected)
        assert_all_close(served, expected, atol=1e-5)
    return restored, predictions


@contextlib.contextmanager
def file_size_limit(size):
    """Writes past `size` bytes fail with `OSError` (EFBIG), as they would on a full disk.

    `RLIMIT_FSIZE` binds the whole process for the block; SIGXFSZ, which
    would kill it, is ignored meanwhile so the write itself fails.
    """
    import resource
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def folder_state(folder):
    """`{relative path: sha256}` of every file under `folder`, and each folder as `None`: what a command may not change."""
    import hashlib

    state = {}
    for root, folders, files in os.walk(folder):
        for name in folders:
            state[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                state[os.path.relpath(path, folder)] = hashlib.sha256(file.read()).hexdigest()
    return state


# The tiny models every test file builds


def tiny_classifier(num_classes=2, sequence_length=12, vocabulary=TINY_VOCABULARY, architecture="bert",
                    dropout=None, encoder_options=None, **classifier_options):
    """A classifier on raw text of the tiny encoder (`tiny_encoder_kwargs`), with its preprocessor.

    `dropout` sets the encoder's and the head's (None: their defaults);
    `encoder_options` override the tiny encoder's arguments;
    `classifier_options` go to `kbert.Classifier`.
    """
    import kbert

    encoder_arguments = {**tiny_encoder_kwargs(len(vocabulary), architecture), **(encoder_options or {})}
    if dropout is not None:
        encoder_arguments["dropout"] = classifier_options["dropout"] = dropout
    preprocessor = kbert.TextPacker(kbert.Tokenizer(vocabulary), sequence_length=sequence_length)
    return kbert.Classifier(kbert.Encoder(**encoder_arguments), num_classes=num_classes, preprocessor=preprocessor,
                            **classifier_options)


# The `kbert` command, as a user runs it


def cli_refusal(capsys, *arguments):
    """Runs `kbert ARGUMENTS...` here, which must refuse them: exit status 2, one line on stderr, nothing on stdout.

    Returns the line without its `kbert COMMAND: error: ` prefix.
    """
    from kbert import cli

    assert cli.main(list(arguments)) == 2, arguments
    return refusal_line(capsys, arguments[0])


def refusal_line(capsys, command):
    """The one line of a refused `kbert COMMAND` that `capsys` caught, without its prefix; nothing else was written."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and not captured.out and "Traceback" not in captured.err, captured.err + captured.out
    prefix = f"kbert {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0].removeprefix(prefix)


def run_cli_process(*arguments, kill_at_step=None, timeout=300):
    """`kbert ARGUMENTS...` in a process of its own (`CompletedProcess`, text), killed after optimizer step `kill_at_step`."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "pretraining" / "pretraining_run.py"
    kill = () if kill_at_step is None else ("--kill-at-step", str(kill_at_step))
    return subprocess.run([sys.executable, str(script), "cli", *kill, *arguments],
                          capture_output=True, text=True, timeout=timeout)
