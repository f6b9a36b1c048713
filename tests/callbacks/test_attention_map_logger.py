import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.callbacks import AttentionMapLogger, attention_scores
from kbert.callbacks.images import CARD_WIDTH, MARGIN, TITLE_FONT_SIZE, colour_map, format_range
from tests.callbacks.event_files import images
from tests.callbacks.test_images import contains, count, dark, rendered, text_width
from tests.pretraining.test_pretrainer import pretraining_batch, tiny_pretrainer
from tests.test_case import TINY_VOCABULARY, numpy, tiny_encoder_kwargs

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def direct_attention(layer, x, padding_mask):
    """softmax(Q K^T / sqrt(d) + mask) per head, from the layer's weights in NumPy."""
    attention = layer.self_attention_layer
    def project(dense):
        return np.einsum("btd,dhk->bthk", x, dense.kernel.numpy()) + dense.bias.numpy()
    query, key = project(attention.query_dense), project(attention.key_dense)
    logits = np.einsum("bqhk,bthk->bhqt", query, key) / np.sqrt(query.shape[-1])
    logits = np.where(padding_mask[:, None, None, :] > 0, logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


def embeddings(encoder, inputs):
    token_ids, segment_ids = inputs["token_ids"], inputs["segment_ids"]
    x = (encoder.token_embedding.embeddings.numpy()[token_ids]
         + encoder.position_embedding.position_embeddings.numpy()[: token_ids.shape[1]]
         + encoder.segment_embedding.embeddings.numpy()[segment_ids])
    norm = encoder.embeddings_layer_norm
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * norm.gamma.numpy() + norm.beta.numpy()


def test_attention_scores_are_those_of_the_encoder():
    keras.utils.set_random_seed(0)
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    inputs = {
        "token_ids": np.array([[2, 5, 7, 9, 3, 0], [2, 8, 3, 0, 0, 0]]),
        "segment_ids": np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]),
        "padding_mask": np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]),
    }
    scores = attention_scores(encoder, inputs)
    assert len(scores) == 2 and all(s.shape == (2, 2, 6, 6) for s in scores)
    # Each block's input: the embeddings, then the previous block's output as the encoder computes it.
    outputs = encoder(inputs)["encoder_outputs"]
    layer_inputs = [embeddings(encoder, inputs)] + [numpy(o) for o in outputs[:-1]]
    for layer, x, found in zip(encoder.transformer_layers, layer_inputs, scores):
        np.testing.assert_allclose(found, direct_attention(layer, x, inputs["padding_mask"]), atol=1e-5)
    np.testing.assert_allclose(scores[1].sum(-1), 1.0, atol=1e-5)
    assert np.all(scores[0][1, :, :, 3:] == 0)  # no attention to padding


def test_the_logger_draws_every_block_during_fit(tmp_path):
    keras.utils.set_random_seed(0)
    model = tiny_pretrainer()
    model.compile(jit_compile=False)  # XLA compiling costs more than these 4 steps
    logger = AttentionMapLogger(tmp_path, "the cats sat", vocabulary=TINY_VOCABULARY, every=2)
    model.fit(tf.data.Dataset.from_tensors(pretraining_batch()).repeat(4), epochs=1, verbose=0,
              callbacks=[logger])

    written = images(tmp_path / "train")
    assert sorted(written) == ["self_attention/layer_0", "self_attention/layer_1"]
    assert sorted(written["self_attention/layer_0"]) == [2, 4]  # steps 2 and 4, the last once
    # The last images are the drawings of the final model's scores: per block one sample per head.
    for tag, heads in logger.images().items():
        assert heads.dtype == np.uint8 and heads.shape[0] == 2 and heads.shape[-1] == 3
        np.testing.assert_array_equal(written[tag][4], heads)


def test_each_head_is_one_image_with_its_own_colour_scale(tmp_path):
    keras.utils.set_random_seed(0)
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    for layer in encoder.transformer_layers:
        # Head 0 sharpened (larger queries); head 1 attends almost evenly, as untrained heads do.
        query = layer.self_attention_layer.query_dense.kernel
        query.assign(keras.ops.convert_to_numpy(query) * np.array([20.0, 1.0])[None, :, None])
    logger = AttentionMapLogger(tmp_path, "the cats sat", vocabulary=TINY_VOCABULARY)
    tokens, scores = logger.attention(encoder)
    drawn = logger.images(encoder)
    assert sorted(drawn) == ["self_attention/layer_0", "self_attention/layer_1"]
    for number, (layer_scores, heads) in enumerate(zip(scores, drawn.values())):
        # Two heads, two samples of one size, each as wide as TensorBoard's card.
        assert heads.shape[0] == 2 and heads.shape[2] >= CARD_WIDTH
        ranges = [format_range(float(head.min()), float(head.max())) for head in layer_scores]
        assert ranges[0] != ranges[1]
        for h, image in enumerate(heads):
            # Coloured on its own range, a head's least attended cell is the lightest colour and its
            # most the darkest, even where it attends almost evenly (a cell is at least 14 x 14
            # pixels; the colour bar has only a few of either).
            assert count(image, colour_map(0.0)) >= 14 * 14 and count(image, colour_map(1.0)) >= 14 * 14
            # Six tokens: large cells, text at full size; the bar's ends are this head's numbers.
            low, high = ranges[h]
            assert contains(image, rendered(low)) and contains(image, rendered(high))
            title = f"layer {number}, head {h}"
            assert contains(image, rendered(title)) and text_width(title) <= image.shape[1] - 2 * MARGIN
            for token in tokens:
                assert contains(image, rendered(token, TITLE_FONT_SIZE))
            assert not dark(image[:, -MARGIN:]).any()


def test_long_tokens_widen_the_image_and_every_head_has_one_size(tmp_path):
    vocabulary = TINY_VOCABULARY + ["extraordinarily"]
    encoder = kbert.Encoder(**tiny_encoder_kwargs(vocabulary_size=len(vocabulary)))
    short = AttentionMapLogger(tmp_path, "the cat", vocabulary=vocabulary).images(encoder)
    long = AttentionMapLogger(tmp_path, "extraordinarily the cat", vocabulary=vocabulary).images(encoder)
    for tag, heads in long.items():
        assert heads.shape[0] == 2 and heads.shape[2] > short[tag].shape[2]
        # Cut to 13 letters and an ellipsis, written whole on its row.
        assert all(contains(image, rendered("extraordinari…")) for image in heads)


def test_a_task_model_tokenizes_with_its_preprocessor(tmp_path):
    preprocessor = kbert.TextPacker(kbert.Tokenizer(TINY_VOCABULARY), 12)
    model = kbert.Classifier(kbert.Encoder(**tiny_encoder_kwargs()), num_classes=2, preprocessor=preprocessor)
    tokens, scores = AttentionMapLogger(tmp_path, ("the cats sat", "on the mat")).attention(model)
    assert tokens == ["[CLS]", "the", "cat", "##s", "sat", "[SEP]", "on", "the", "mat", "[SEP]"]
    assert [s.shape for s in scores] == [(2, 10, 10)] * 2
    packed = preprocessor((["the cats sat"], ["on the mat"]))
    packed = {name: np.asarray(value)[:, :10] for name, value in packed.items()}
    for found, expected in zip(scores, attention_scores(model.encoder, packed)):
        np.testing.assert_array_equal(found, expected[0])


def test_the_logger_needs_a_tokenizer_and_an_encoder(tmp_path):
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    with pytest.raises(ValueError, match="give the `vocabulary`"):
        AttentionMapLogger(tmp_path, "the cat").attention(encoder)
    with pytest.raises(TypeError, match="needs a kbert.Encoder"):
        AttentionMapLogger(tmp_path, "the cat", vocabulary=TINY_VOCABULARY).attention(keras.Sequential())
    with pytest.raises(TypeError, match="`text`"):
        AttentionMapLogger(tmp_path, ["a", "b", "c"])
    with pytest.raises(ValueError, match="`every`"):
        AttentionMapLogger(tmp_path, "a", every=0)
