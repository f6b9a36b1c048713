import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.callbacks.attention_map_logger import attention_scores
from tests.callbacks.event_files import scalars
from tests.test_case import assert_allclose, assert_array_equal, numpy, tiny_encoder_kwargs, TINY_VOCABULARY

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends

TEXTS = [
    "the cat sat on the mat", "a good film", "free prize now !", "see you soon",
    "the dog sat", "a bad film , see", "the cat !", "you sat on a mat now",
]
PARTS = ["attention_loss", "embedding_loss", "hidden_loss", "loss"]


def packer(sequence_length=12):
    return kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), sequence_length)


def encoder(**overrides):
    return kbert.Encoder(**{**tiny_encoder_kwargs(), **overrides})


def copy_of(model):
    copy = kbert.Encoder.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy


def sharpen_attention(model, factor=20.0):
    """Scales the query and key kernels, so that the maps are far from uniform (something to learn)."""
    for block in model.transformer_layers:
        attention = block.self_attention_layer
        for dense in (attention.query_dense, attention.key_dense):
            dense.kernel.assign(dense.kernel * factor)


def batch():
    # Padded to 12: every row has padding, the rows have different lengths.
    return {name: np.asarray(value) for name, value in packer()(TEXTS[:4]).items()}


def test_projections_exist_exactly_when_widths_differ():
    teacher = encoder(num_layers=4)
    same_width = kbert.LayerwiseDistiller(teacher, encoder(), preprocessor=packer())
    assert same_width.embedding_projection is None and same_width.hidden_projection is None
    assert same_width.layer_map == (1, 3)

    student = encoder(hidden_dim=8, num_layers=3)
    narrower = kbert.LayerwiseDistiller(teacher, student, preprocessor=packer(), layer_map=[0, 0, 3])
    assert narrower.layer_map == (0, 0, 3)
    for projection in (narrower.embedding_projection, narrower.hidden_projection):
        assert tuple(projection.kernel.shape) == (8, 16) and tuple(projection.bias.shape) == (16,)
    assert narrower.embedding_projection is not narrower.hidden_projection
    # The projections train with the student; the teacher and the student's pooler do not.
    trainable = {id(v) for v in narrower.trainable_variables}
    assert {id(v) for v in narrower.hidden_projection.weights} <= trainable
    assert not {id(v) for v in teacher.weights} & trainable
    assert not {id(v) for v in student.pooler_dense.weights} & trainable
    assert len(trainable) == len(student.trainable_variables) - 2 + 4
    # A part switched off needs no projection.
    no_hidden = kbert.LayerwiseDistiller(teacher, encoder(hidden_dim=8), preprocessor=packer(),
                                         hidden_states=False)
    assert no_hidden.hidden_projection is None and no_hidden.embedding_projection is not None
    assert no_hidden.parts == ("embedding_loss", "attention_loss")


def test_a_copy_of_the_student_as_teacher_gives_zero_losses():
    student = encoder()
    distiller = kbert.LayerwiseDistiller(copy_of(student), student, preprocessor=packer(),
                                         layer_map=[0, 1])
    parts = distiller.compute_loss_parts(batch())
    assert sorted(parts) == PARTS
    for name, value in parts.items():
        assert abs(float(value)) < 1e-6, (name, float(value))
    logs = distiller.evaluate(TEXTS, batch_size=4, verbose=0, return_dict=True)
    assert sorted(logs) == PARTS and max(abs(v) for v in logs.values()) < 1e-6


def numpy_states(model, inputs):
    embeddings = numpy(model.embed(inputs["token_ids"], inputs["segment_ids"], training=False))
    hidden = [numpy(h) for h in model(inputs, training=False)["encoder_outputs"]]
    return embeddings, hidden, attention_scores(model, inputs)


def numpy_mse(student, teacher, mask):
    real = mask.astype(bool)
    return np.mean((student[real] - teacher[real]) ** 2)


def numpy_attention_mse(student, teacher, mask):
    if student.shape[1] != teacher.shape[1]:
        student, teacher = student.mean(1, keepdims=True), teacher.mean(1, keepdims=True)
    pairs = (mask[:, :, None] * mask[:, None, :]).astype(bool)  # (batch, query, key)
    return np.mean([(student[:, h] - teacher[:, h])[pairs] ** 2 for h in range(student.shape[1])])


@pytest.mark.parametrize("student_heads", [2, 4])
def test_loss_parts_equal_a_numpy_computation(student_heads):
    teacher = encoder(num_layers=3, num_heads=4)
    sharpen_attention(teacher)
    student = encoder(hidden_dim=8, num_heads=student_heads)
    distiller = kbert.LayerwiseDistiller(teacher, student, preprocessor=packer())
    assert distiller.layer_map == (0, 2)
    inputs = batch()
    mask = inputs["padding_mask"]
    teacher_embeddings, teacher_hidden, teacher_attention = numpy_states(teacher, inputs)
    student_embeddings, student_hidden, student_attention = numpy_states(student, inputs)

    def project(projection, x):
        kernel, bias = (numpy(w) for w in projection.weights)
        return x @ kernel + bias

    expected = {
        "embedding_loss": numpy_mse(project(distiller.embedding_projection, student_embeddings),
                                    teacher_embeddings, mask),
        "hidden_loss": sum(numpy_mse(project(distiller.hidden_projection, student_hidden[m]),
                                     teacher_hidden[t], mask) for m, t in enumerate((0, 2))),
        "attention_loss": sum(numpy_attention_mse(student_attention[m], teacher_attention[t], mask)
                              for m, t in enumerate((0, 2))),
    }
    expected["loss"] = sum(expected.values())
    parts = {name: float(value) for name, value in distiller.compute_loss_parts(inputs).items()}
    assert sorted(parts) == PARTS
    for name in PARTS:
        assert_allclose(parts[name], expected[name], rtol=1e-4, err_msg=name)
    assert expected["attention_loss"] > 1e-3  # a map mismatch the test can see
    # Padding is left out: changing what the padded positions hold changes nothing.
    repadded = dict(inputs, token_ids=np.where(mask == 1, inputs["token_ids"], 7))
    assert_allclose(float(distiller.compute_loss_parts(repadded)["loss"]), parts["loss"],
                               rtol=1e-5)


def test_training_reduces_every_part_and_brings_the_student_closer(tmp_path):
    keras.utils.set_random_seed(1)
    teacher = encoder(num_layers=4, num_heads=4)
    sharpen_attention(teacher)
    student = encoder(hidden_dim=8, dropout=0.0)
    teacher_before = [w.copy() for w in teacher.get_weights()]
    pooler_before = [numpy(w).copy() for w in student.pooler_dense.weights]
    distiller = kbert.LayerwiseDistiller(teacher, student, preprocessor=packer())
    distiller.compile(learning_rate=3e-2)
    inputs = batch()
    before = distiller.compute_loss_parts(inputs)
    history = distiller.fit(TEXTS, batch_size=2, epochs=5, verbose=0,
                            callbacks=[keras.callbacks.TensorBoard(str(tmp_path))])
    after = distiller.compute_loss_parts(inputs)
    assert int(distiller.optimizer.iterations) == 20
    # The attention maps move more slowly (sharp teacher maps, large student steps are needed).
    for name, ratio in [("embedding_loss", 0.8), ("hidden_loss", 0.8), ("attention_loss", 0.9),
                        ("loss", 0.8)]:
        assert float(after[name]) < ratio * float(before[name]), (name, before[name], after[name])
        assert history.history[name][-1] < history.history[name][0], name

    # The student's own last layer, projected, is nearer the teacher's.
    mask = inputs["padding_mask"]
    target = numpy(teacher(inputs)["sequence_output"])
    moved = numpy(distiller.hidden_projection(student(inputs)["sequence_output"]))
    assert numpy_mse(moved, target, mask) < numpy_mse(np.zeros_like(target), target, mask)
    # The teacher and the student's pooler are left as they were.
    for was, now in zip(teacher_before, teacher.get_weights()):
        assert_array_equal(was, now)
    for was, now in zip(pooler_before, student.pooler_dense.weights):
        assert_array_equal(was, numpy(now))

    # Each part is a scalar of its own in TensorBoard, equal to the logs.
    train = scalars(tmp_path / "train")
    for name in PARTS:
        assert sorted(train[f"epoch_{name}"]) == list(range(5))
        assert_allclose(train[f"epoch_{name}"][4], history.history[name][-1], rtol=1e-6)


def test_task_models_give_their_encoder_and_packer_and_datasets_and_pairs_fit():
    teacher = kbert.Classifier(encoder(num_layers=4), num_classes=2, preprocessor=packer(10))
    student_model = kbert.Classifier(encoder(), num_classes=2, preprocessor=packer(10))
    distiller = kbert.LayerwiseDistiller(teacher, student_model, attention=False)
    assert distiller.teacher is teacher.encoder and distiller.student is student_model.encoder
    assert distiller.preprocessor is teacher.preprocessor.packer
    # A bare teacher encoder: the student task model's packer.
    from_student = kbert.LayerwiseDistiller(teacher.encoder, student_model)
    assert from_student.preprocessor is student_model.preprocessor.packer
    # An endless dataset of texts, with steps_per_epoch.
    dataset = tf.data.Dataset.from_tensor_slices(TEXTS).repeat()
    history = distiller.fit(dataset, batch_size=3, steps_per_epoch=2, epochs=2, verbose=0)
    assert sorted(history.history) == ["embedding_loss", "hidden_loss", "loss"]
    assert int(distiller.optimizer.iterations) == 4
    # Text pairs, and validation texts.
    pairs = (TEXTS[:4], TEXTS[4:])
    history = distiller.fit(pairs, batch_size=2, verbose=0, validation_data=TEXTS[:2])
    assert "val_hidden_loss" in history.history
    assert int(distiller.optimizer.iterations) == 6
    packed = next(iter(distiller.text_dataset(pairs, batch_size=4)))
    assert set(numpy(packed["segment_ids"]).ravel()) == {0, 1}
    # Batches are padded to their longest text (rounded up to 8), not to the sequence length.
    assert next(iter(distiller.text_dataset(["a cat"], batch_size=1)))["token_ids"].shape == (1, 8)


def test_config_and_keras_file_round_trip(tmp_path):
    distiller = kbert.LayerwiseDistiller(encoder(num_layers=3), encoder(hidden_dim=8),
                                         preprocessor=packer(), layer_map=[1, 2], embeddings=False)
    config = distiller.get_config()
    restored = kbert.LayerwiseDistiller.from_config(config)
    assert restored.get_config() == config
    distiller.fit(TEXTS[:4], batch_size=2, verbose=0)
    path = str(tmp_path / "distiller.keras")
    distiller.save(path)
    loaded = kbert.load_model(path)
    assert loaded.layer_map == (1, 2) and loaded.parts == ("hidden_loss", "attention_loss")
    inputs = batch()
    for name, value in distiller.compute_loss_parts(inputs).items():
        assert_allclose(float(loaded.compute_loss_parts(inputs)[name]), float(value),
                                   rtol=1e-6)
    # The optimizer comes back with its state, ready to go on.
    assert int(loaded.optimizer.iterations) == 2
    for saved, restored_variable in zip(distiller.optimizer.variables, loaded.optimizer.variables):
        assert_array_equal(numpy(saved), numpy(restored_variable))


def test_bad_arguments():
    vocabulary = TINY_VOCABULARY
    other = vocabulary[:10] + ["dogs"] + vocabulary[11:]  # same size, one token differs
    teacher = kbert.Classifier(encoder(), num_classes=2,
                               preprocessor=kbert.TextPacker(kbert.Tokenizer(vocabulary), 8))
    student = kbert.Classifier(encoder(), num_classes=2,
                               preprocessor=kbert.TextPacker(kbert.Tokenizer(other), 8))
    with pytest.raises(ValueError, match=r"student's vocabulary differs .* id 10: 'dogs' vs 'on'"):
        kbert.LayerwiseDistiller(teacher, student)
    with pytest.raises(ValueError, match="teacher embeds 27 tokens but the student 30"):
        kbert.LayerwiseDistiller(teacher, encoder(vocabulary_size=30))
    with pytest.raises(ValueError, match="bare encoders: pass `preprocessor`"):
        kbert.LayerwiseDistiller(encoder(), encoder())
    with pytest.raises(ValueError, match="all False: nothing to distil"):
        kbert.LayerwiseDistiller(teacher, encoder(), embeddings=False, hidden_states=False,
                                 attention=False)
    with pytest.raises(ValueError, match="outside the teacher's layers 0 to 1"):
        kbert.LayerwiseDistiller(teacher, encoder(), layer_map=[0, 2])
    with pytest.raises(ValueError, match="deeper than its teacher"):
        kbert.LayerwiseDistiller(teacher, encoder(num_layers=3))
    with pytest.raises(TypeError, match="`student` must be a kbert.Encoder or a kbert task model"):
        kbert.LayerwiseDistiller(teacher, keras.Sequential())
    with pytest.raises(ValueError, match="The student: `sequence_length` 40 exceeds"):
        kbert.LayerwiseDistiller(encoder(max_sequence_length=64), encoder(), preprocessor=packer(40))
    distiller = kbert.LayerwiseDistiller(teacher, encoder())
    with pytest.raises(TypeError, match="no labels"):
        distiller.fit(TEXTS, y=[0] * len(TEXTS))
