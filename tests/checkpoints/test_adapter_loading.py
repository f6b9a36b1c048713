"""LoRA adapter files: saved apart from the encoder, loaded on their base and no other."""

import io
import json
import os
import zipfile

import keras
import numpy as np
import pytest

import kbert
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs

TEXTS = ["the cat sat on the mat", "a good film", "free prize now", "see you soon", "the dog sat", "a bad film"]


def tuned(base, labels, seed, **options):
    """A LoRA classifier on `base` (copied, not changed), fitted on `labels`."""
    keras.utils.set_random_seed(seed)
    model = kbert.classifier(base, num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=12, lora_rank=2,
                             **options)
    model.fit(TEXTS, labels, epochs=2, batch_size=3, verbose=0)
    return model


def _rewritten(path, target_path, change):
    """A copy of the adapter file `path` at `target_path`, its metadata changed in place by `change`."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target_path, "w") as target:
        for member in source.namelist():
            data = source.read(member)
            if member == "adapter.json":
                metadata = json.loads(data)
                change(metadata)
                data = json.dumps(metadata)
            target.writestr(member, data)
    return target_path


@pytest.fixture(scope="module")
def base():
    keras.utils.set_random_seed(0)
    return kbert.Encoder(**tiny_encoder_kwargs(), dropout=0.0)


@pytest.mark.all_backends
def test_one_base_serves_several_adapters_each_as_it_was_trained(base, tmp_path):
    before = [w.copy() for w in base.get_weights()]
    first = tuned(base, [0, 1, 1, 0, 0, 1], seed=1)
    second = tuned(base, [1, 1, 0, 0, 1, 0], seed=2, lora_targets=["query", "value", "output"])
    assert base.lora is None  # the builder trained a copy
    paths = [first.save_adapter(tmp_path / "first.adapter"), second.save_adapter(tmp_path / "second.adapter")]
    loaded = [kbert.load_adapter(path, base=base) for path in paths]
    for again, original in zip(loaded, (first, second)):
        assert again.encoder.lora == original.encoder.lora
        np.testing.assert_allclose(again.predict(TEXTS, verbose=0), original.predict(TEXTS, verbose=0), atol=1e-6)
    assert not np.allclose(loaded[0].predict(TEXTS, verbose=0), loaded[1].predict(TEXTS, verbose=0), atol=1e-3)
    # Training one loaded model changes neither the base nor the other.
    scores = loaded[1].predict(TEXTS, verbose=0)
    loaded[0].fit(TEXTS, [0, 1, 1, 0, 0, 1], epochs=1, batch_size=3, verbose=0)
    np.testing.assert_allclose(loaded[1].predict(TEXTS, verbose=0), scores, atol=1e-6)
    for got, expected in zip(base.get_weights(), before):
        np.testing.assert_array_equal(got, expected)
    # What the file holds: the adapters, pooler and head, a small part of the whole model.
    first.save(tmp_path / "first.keras")
    assert os.path.getsize(paths[0]) < os.path.getsize(tmp_path / "first.keras") / 3


def test_an_adapter_names_its_base_and_loads_on_it_alone(base, tmp_path, monkeypatch):
    base_file = tmp_path / "base.keras"
    base.save(base_file)
    model = tuned(str(base_file), [0, 1, 1, 0, 0, 1], seed=1)
    path = model.save_adapter(tmp_path / "a.adapter")
    with zipfile.ZipFile(path) as archive:
        metadata = json.loads(archive.read("adapter.json"))
    assert metadata["base"]["name"] == str(base_file)
    # A path named in the file is not read unless the user gives it.
    with pytest.raises(ValueError, match=r"a.adapter names its base encoder '.*base.keras', which is not a "
                                         r"checkpoint kbert knows by name, and kbert reads no path that a file "
                                         r"names: give load_adapter\(..., base=\)"):
        kbert.load_adapter(path)
    again = kbert.load_adapter(path, base=str(base_file))
    np.testing.assert_allclose(again.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=1e-6)
    # A name kbert knows is found in its package, not in a folder of that name where kbert runs.
    renamed = _rewritten(path, tmp_path / "named.adapter", lambda metadata: metadata["base"].update(
        name="all-MiniLM-L6-v2"))
    os.makedirs(tmp_path / "all-MiniLM-L6-v2")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"an encoder of another shape: its vocabulary_size is \d+, "
                                         r"all-MiniLM-L6-v2's is 30522"):
        kbert.load_adapter(renamed)

    keras.utils.set_random_seed(5)
    other = kbert.Encoder(**tiny_encoder_kwargs())
    with pytest.raises(ValueError, match=r"a.adapter was trained on another base encoder \(.*base.keras, weights "
                                         r"[0-9a-f]{12}\.\.\.\): the base given has weights [0-9a-f]{12}\.\.\."):
        kbert.load_adapter(path, base=other)
    wider = kbert.Encoder(**{**tiny_encoder_kwargs(), "intermediate_dim": 48})
    with pytest.raises(ValueError, match="an encoder of another shape: its intermediate_dim is 32, the base "
                                         "given's is 48"):
        kbert.load_adapter(path, base=wider)


def test_what_is_not_an_adapter_file_is_refused_in_one_line(base, tmp_path):
    model = tuned(base, [0, 1, 1, 0, 0, 1], seed=1)
    path = model.save_adapter(tmp_path / "a.adapter")
    cut = tmp_path / "cut.adapter"
    cut.write_bytes(open(path, "rb").read()[:200])
    with pytest.raises(ValueError, match=r"cut.adapter is not a kbert adapter file \("):
        kbert.load_adapter(cut, base=base)
    # A member that holds a pickled object is not read.
    pickled = tmp_path / "pickled.adapter"
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(pickled, "w") as target:
        replaced = next(name for name in source.namelist() if name.startswith("weights/"))
        for name in source.namelist():
            target.writestr(name, buffer.getvalue() if name == replaced else source.read(name))
    with pytest.raises(ValueError, match="pickled.adapter is not a kbert adapter file"):
        kbert.load_adapter(pickled, base=base)
    # A config that would build far more than the base and the file hold, or adapters wider than the encoder.
    for name, change, message in (
            ("huge.adapter", lambda config: config["config"]["preprocessor"]["config"].update(num_classes=10 ** 8),
             "its config implies a model of at least"),
            ("wide.adapter", lambda config: config["config"]["encoder"]["config"]["lora"].update(rank=10 ** 6),
             "no LoRA rank from 1 to the base's width 16")):
        rewritten = _rewritten(path, tmp_path / name, lambda metadata, change=change: change(metadata["model"]))
        with pytest.raises(ValueError, match=message):
            kbert.load_adapter(rewritten, base=base)
    with pytest.raises(FileNotFoundError, match="missing.adapter: no adapter file there"):
        kbert.load_adapter(tmp_path / "missing.adapter", base=base)
    plain = kbert.classifier(base, num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=12)
    with pytest.raises(ValueError, match="has no LoRA adapters to save"):
        plain.save_adapter(tmp_path / "plain.adapter")
    assert not os.path.exists(tmp_path / "plain.adapter")
