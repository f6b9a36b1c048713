"""A `.keras` file never makes kbert read a path named inside it (as keras-team/keras#21751 fixed)."""

import json
import re
import zipfile

import keras
import numpy as np
import pytest

import kbert
from kbert import cli
from tests.test_case import TINY_VOCABULARY, tiny_encoder_kwargs


@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory):
    """The path of a tiny classifier saved as a `.keras` file."""
    kwargs = tiny_encoder_kwargs()
    for set_by_the_entry_point in ("vocabulary_size", "max_sequence_length"):
        kwargs.pop(set_by_the_entry_point)
    model = kbert.classifier("tiny", num_classes=2, vocabulary=TINY_VOCABULARY, sequence_length=8, **kwargs)
    path = tmp_path_factory.mktemp("saved") / "classifier.keras"
    model.save(path)
    return path


def tokenizer_configs(node):
    """Every config dict of a `kbert.Tokenizer` in a JSON tree."""
    if isinstance(node, dict):
        if node.get("class_name") == "Tokenizer" and node.get("registered_name") == "kbert>Tokenizer":
            yield node["config"]
        for value in node.values():
            yield from tokenizer_configs(value)
    elif isinstance(node, list):
        for value in node:
            yield from tokenizer_configs(value)


def with_config_changed(source, target, change):
    """Copies the `.keras` zip `source` to `target`, its `config.json` passed through `change`."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for item in original.infolist():
            data = original.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                change(config)
                data = json.dumps(config).encode("utf-8")
            copy.writestr(item, data)


def test_a_keras_file_naming_a_vocabulary_path_is_refused(saved_classifier, tmp_path, capsys):
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("\n".join(TINY_VOCABULARY) + "\n", encoding="utf-8")

    def name_the_vocabulary_file(config):
        found = list(tokenizer_configs(config))
        assert len(found) == 1
        found[0]["vocabulary"] = str(vocabulary)

    changed = tmp_path / "changed.keras"
    with_config_changed(saved_classifier, changed, name_the_vocabulary_file)
    expected = f"{changed}: Tokenizer config's `vocabulary` must be a list of tokens, got '{vocabulary}'"
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        kbert.load_model(changed)
    # `kbert export` would have copied the file into the SavedModel's assets.
    served = tmp_path / "served"
    assert cli.main(["export", str(changed), "--name", "m", "--out", str(served)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kbert export: error: {changed}: Tokenizer config's `vocabulary`") and "\n" not in err
    assert not served.exists()
    # The refusal is safe mode's: a trusted file still loads.
    model = keras.saving.load_model(changed, safe_mode=False)
    assert model.preprocessor.tokenizer.get_vocabulary() == TINY_VOCABULARY


def test_a_member_bigger_than_a_model_holds_is_refused_before_it_is_read(saved_classifier, tmp_path, capsys):
    from kbert.io.safe_loading import LIMITS, check_keras_file

    # A valid config followed by 65 MB of whitespace: 64 KB in the zip.
    padding = LIMITS["config.json"] + 1_000_000
    padded = tmp_path / "padded.keras"
    with zipfile.ZipFile(saved_classifier) as original, zipfile.ZipFile(padded, "w", zipfile.ZIP_DEFLATED) as copy:
        for item in original.infolist():
            data = original.read(item)
            if item.filename == "config.json":
                data += b" " * padding
            copy.writestr(item.filename, data)
    assert padded.stat().st_size < 20 * 1024 * 1024
    size = zipfile.ZipFile(padded).getinfo("config.json").file_size
    served = tmp_path / "served"
    assert cli.main(["export", str(padded), "--name", "m", "--out", str(served)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"kbert export: error: {padded}: its member config.json is {size:,} bytes uncompressed, over "
                   f"the {LIMITS['config.json']:,} bytes kbert reads for config.json; refused before reading it.")
    assert not served.exists()

    # Each member has its limit: the weights, an asset, anything else.
    with zipfile.ZipFile(saved_classifier) as archive:
        weights = archive.getinfo("model.weights.h5").file_size
    with pytest.raises(ValueError, match=f"its member model.weights.h5 is {weights:,} bytes uncompressed, over the "
                                         "1,000 bytes"):
        check_keras_file(saved_classifier, limits={"model.weights.h5": 1000})
    extra = tmp_path / "extra.keras"
    with_config_changed(saved_classifier, extra, lambda config: None)
    with zipfile.ZipFile(extra, "a") as archive:
        archive.writestr("assets/big.txt", b"x" * 2000)
    with pytest.raises(ValueError, match="its member assets/big.txt is 2,000 bytes uncompressed, over the 1,000 "
                                         "bytes kbert reads for an asset"):
        check_keras_file(extra, limits={"assets/": 1000})
    check_keras_file(saved_classifier)  # kbert's own file passes


# Sizes a config claims, against the weights the file holds.
def encoder_config(config):
    return config["config"]["encoder"]["config"]


def refused_before_building(path, monkeypatch):
    """The one-line ValueError of `kbert.load_model(path)`, raised before Keras reads (or builds) the model."""
    import time

    def never(*args, **kwargs):
        raise AssertionError("Keras was asked to load the model")

    monkeypatch.setattr(keras.saving, "load_model", never)
    start = time.monotonic()
    with pytest.raises(ValueError) as error:
        kbert.load_model(path)
    assert time.monotonic() - start < 5
    message = str(error.value)
    assert "\n" not in message and len(message) < 300, message
    return message


@pytest.mark.parametrize("key, value", [("vocabulary_size", 20_000_000), ("max_sequence_length", 20_000_000),
                                        ("hidden_dim", 100_000)])
def test_a_config_claiming_more_weights_than_the_file_holds_is_refused(saved_classifier, tmp_path, monkeypatch,
                                                                      key, value):
    changed = tmp_path / "model.keras"
    with_config_changed(saved_classifier, changed, lambda config: encoder_config(config).update({key: value}))
    message = refused_before_building(changed, monkeypatch)
    assert message.startswith(f"{changed}: config.json says {key} {value} for the encoder 'encoder', a model of at "
                              "least ")
    assert message.endswith(" weights, but model.weights.h5 holds 13,443; refused before building it.")


def test_a_renamed_encoder_is_checked_as_keras_would_find_it(saved_classifier, tmp_path, monkeypatch):
    def rename(config):
        # Keras finds the class by its registered name (which defaults to the class name).
        encoder = config["config"]["encoder"]
        encoder.update(class_name="kbert>Encoder", module="elsewhere")
        del encoder["registered_name"]
        encoder["config"]["vocabulary_size"] = 20_000_000

    changed = tmp_path / "model.keras"
    with_config_changed(saved_classifier, changed, rename)
    assert refused_before_building(changed, monkeypatch).startswith(
        f"{changed}: config.json says vocabulary_size 20000000 for the encoder 'encoder'")


def test_too_many_layers_are_refused_before_building(saved_classifier, tmp_path, monkeypatch):
    from kbert.io.safe_loading import MAX_LAYERS

    # Shared layers (num_groups 2 of 100,000 layers): the weights hold them all, the build would take minutes.
    shared = tmp_path / "shared.keras"
    with_config_changed(saved_classifier, shared, lambda config: encoder_config(config).update(num_layers=100_000))
    assert refused_before_building(shared, monkeypatch) == (
        f"{shared}: config.json says num_layers 100000 for the encoder 'encoder': 100,000 Transformer layers, over "
        f"the {MAX_LAYERS:,} kbert builds from a file; refused before building it.")
    # 500 layers of their own: the weights of 2.
    distinct = tmp_path / "distinct.keras"
    with_config_changed(saved_classifier, distinct,
                        lambda config: encoder_config(config).update(num_layers=500, num_groups=500))
    assert refused_before_building(distinct, monkeypatch).startswith(
        f"{distinct}: config.json says num_layers 500 for the encoder 'encoder', a model of at least ")


def test_a_head_of_more_classes_than_the_weights_hold_is_refused(saved_classifier, tmp_path, monkeypatch):
    changed = tmp_path / "model.keras"
    with_config_changed(saved_classifier, changed, lambda config: config["config"]["preprocessor"]["config"].update(
        num_classes=20_000_000, class_names=None))
    assert refused_before_building(changed, monkeypatch).startswith(
        f"{changed}: config.json says num_classes 20000000 for the Classifier head, a model of at least ")


def test_a_config_nested_too_deep_is_refused_before_parsing(saved_classifier, tmp_path, monkeypatch):
    from kbert.io.text_files import MAX_JSON_DEPTH

    deep = tmp_path / "deep.keras"
    with zipfile.ZipFile(saved_classifier) as original, zipfile.ZipFile(deep, "w") as copy:
        for item in original.infolist():
            data = original.read(item)
            if item.filename == "config.json":
                data = data[:-1] + b',\n"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
            copy.writestr(item, data)
    assert refused_before_building(deep, monkeypatch) == (
        f"{deep}: its config.json nests deeper than {MAX_JSON_DEPTH} levels (line 2); refused before parsing it.")


def test_an_unknown_class_is_named_in_one_short_line(saved_classifier, tmp_path, capsys):
    def rename_the_encoder(config):
        config["config"]["encoder"].update(class_name="Foo", registered_name="kbert>Foo")

    changed = tmp_path / "model.keras"
    with_config_changed(saved_classifier, changed, rename_the_encoder)
    with pytest.raises(ValueError) as error:
        kbert.load_model(changed)
    message = str(error.value)
    assert message == (f"{changed}: unknown class 'Foo' in its config.json: neither kbert's nor Keras'; kbert loads "
                       "the models it saves.")
    assert len(message) - len(str(changed)) < 300
    served = tmp_path / "served"
    assert cli.main(["export", str(changed), "--name", "m", "--out", str(served)]) == 2
    err = capsys.readouterr().err
    assert err == f"kbert export: error: {message}\n"


def test_a_local_path_with_a_scheme_in_it_is_checked_and_loaded(saved_classifier, tmp_path, monkeypatch):
    import shutil

    from kbert.io.safe_loading import check_keras_file

    # "a://b/model.keras" is the file a:/b/model.keras here; Keras would take it for a URL.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a:" / "b").mkdir(parents=True)
    shutil.copy(saved_classifier, tmp_path / "a:" / "b" / "model.keras")
    assert check_keras_file("a://b/model.keras") == str(tmp_path / "a:" / "b" / "model.keras")
    model = kbert.load_model("a://b/model.keras")
    assert model.preprocessor.tokenizer.get_vocabulary() == TINY_VOCABULARY
    with_config_changed(saved_classifier, tmp_path / "a:" / "b" / "claims.keras",
                        lambda config: encoder_config(config).update(vocabulary_size=20_000_000))
    assert refused_before_building("a://b/claims.keras", monkeypatch).startswith(
        "a://b/claims.keras: config.json says vocabulary_size 20000000")


def test_a_remote_file_is_checked_too(saved_classifier, tmp_path, monkeypatch):
    import tensorflow as tf

    claims = tmp_path / "claims.keras"
    with_config_changed(saved_classifier, claims, lambda config: encoder_config(config).update(num_layers=100_000))
    tf.io.gfile.makedirs("ram://kbert-test")
    tf.io.gfile.copy(str(claims), "ram://kbert-test/claims.keras", overwrite=True)
    assert refused_before_building("ram://kbert-test/claims.keras", monkeypatch).startswith(
        "ram://kbert-test/claims.keras: config.json says num_layers 100000")
    with pytest.raises(FileNotFoundError, match="^No model file at nope://x/model.keras"):
        kbert.load_model("nope://x/model.keras")


def test_weights_stored_in_another_file_are_refused(saved_classifier, tmp_path, monkeypatch):
    import h5py

    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.zeros(16, "float32").tobytes())
    weights = tmp_path / "model.weights.h5"
    with h5py.File(weights, "w") as h5:
        h5.create_dataset("layers/dense/vars/0", shape=(16,), dtype="float32", external=[(str(outside), 0, 64)])
    changed = tmp_path / "model.keras"
    with zipfile.ZipFile(saved_classifier) as original, zipfile.ZipFile(changed, "w") as copy:
        for item in original.infolist():
            data = weights.read_bytes() if item.filename == "model.weights.h5" else original.read(item)
            copy.writestr(item.filename, data)
    assert refused_before_building(changed, monkeypatch) == (
        f"{changed}: its model.weights.h5: the dataset 'layers/dense/vars/0' is stored in another file; kbert reads "
        "weights from the model's own file only.")


def test_weight_counts_are_lower_bounds_of_real_models():
    from kbert.io.safe_loading import encoder_weight_count

    for kwargs in ({}, {"architecture": "albert"}):
        config = tiny_encoder_kwargs(**kwargs)
        encoder = kbert.Encoder(**config)
        held = sum(int(np.prod(w.shape)) for w in encoder.weights)
        count = encoder_weight_count(
            config["vocabulary_size"], config["num_layers"], config["hidden_dim"], config["intermediate_dim"],
            config["max_sequence_length"], 2, config.get("embedding_size"), config.get("num_groups"),
        )
        assert held * 0.8 < count <= held
