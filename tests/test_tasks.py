import pytest

import kbert
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


def test_classifier_from_a_preset_name():
    model = kbert.classifier("tiny", num_classes=3, vocabulary=TINY_VOCABULARY, sequence_length=16)
    assert model.encoder.num_layers == 2 and model.encoder.hidden_dim == 128
    assert model.encoder.vocabulary_size == len(TINY_VOCABULARY)
    assert model.predict(["a good film"], verbose=0).shape == (1, 3)


def test_classifier_from_an_encoder_and_vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCABULARY) + "\n")
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    model = kbert.classifier(encoder, num_classes=2, vocabulary=str(path), sequence_length=8)
    assert model.encoder is encoder
    assert model.preprocessor.tokenizer.get_vocabulary() == TINY_VOCABULARY


def test_preset_arguments_override_the_preset():
    model = kbert.classifier("tiny", vocabulary=TINY_VOCABULARY, num_layers=1, dropout=0.0)
    assert model.encoder.num_layers == 1 and model.encoder.dropout == 0.0


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"encoder": "tiny"}, ValueError, "Give a `vocabulary`"),
        ({"encoder": "gigantic", "vocabulary": TINY_VOCABULARY}, ValueError, "Unknown preset 'gigantic'"),
        ({"encoder": 3, "vocabulary": TINY_VOCABULARY}, TypeError, "a preset name, a checkpoint or a kbert.Encoder"),
        ({"encoder": "tiny", "vocabulary": TINY_VOCABULARY[1:]}, ValueError, r"lacks the special tokens \['\[PAD\]'\]"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        kbert.classifier(**kwargs)


def test_encoder_arguments_with_a_built_encoder_are_refused():
    encoder = kbert.Encoder(**tiny_encoder_kwargs())
    with pytest.raises(ValueError, match="apply to presets"):
        kbert.classifier(encoder, vocabulary=TINY_VOCABULARY, num_layers=4)
