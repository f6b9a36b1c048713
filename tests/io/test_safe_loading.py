"""A `.keras` file never makes kbert read a path named inside it (as keras-team/keras#21751 fixed)."""

import json
import re
import zipfile

import keras
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
