import pytest

import kbert
import kbert.models.task_model
from kbert.builders import TASK_BUILDERS
from kbert.preprocessing.task_preprocessor import TaskPreprocessor
from kbert.serving import ServingModule
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
        ({"encoder": 3, "vocabulary": TINY_VOCABULARY}, TypeError,
         "a preset name, a checkpoint, a kbert.Encoder or a keras-hub BertBackbone"),
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


@pytest.mark.parametrize("name", sorted(TASK_BUILDERS))
def test_every_registered_task_has_a_task_preprocessor_that_serves_it(name, tmp_path):
    # What a sixth task needs: a model, its task preprocessor, a registry entry.
    arguments = {"tagger": {"labels": ["O", "B-X"]}, "question_answerer": {"max_question_length": 8}}.get(name, {})
    model = TASK_BUILDERS[name]("tiny", vocabulary=TINY_VOCABULARY, sequence_length=16, num_layers=1,
                                **arguments)
    assert isinstance(model, kbert.models.task_model.TaskModel)
    assert isinstance(model.preprocessor, TaskPreprocessor)
    assert model.preprocessor.tokenizer.get_vocabulary() == TINY_VOCABULARY
    # The export asks the preprocessor for its signature: no list of task types.
    module = ServingModule(model, text_pairs=False if name in ("classifier", "embedder") else None)
    assert set(module.signatures()) == {"serving_default", "from_token_ids", "from_tf_example"}


def test_lora_on_a_fresh_preset_warns_that_its_frozen_weights_are_random():
    with pytest.warns(UserWarning, match="preset 'tiny' is freshly initialised: its frozen weights are random"):
        model = kbert.classifier("tiny", vocabulary=TINY_VOCABULARY, sequence_length=8, num_layers=1, lora_rank=2)
    assert model.encoder.lora["rank"] == 2
