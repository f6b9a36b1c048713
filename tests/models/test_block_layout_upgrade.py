import hashlib
import io
import pathlib
import zipfile

import h5py
import keras
import numpy as np

import kbert
from kbert.models.block_layout_upgrade import has_old_block_layout, upgrade_block_layout
from kbert.models.transformer_block import KERAS_HUB_BLOCK_ATTRIBUTES

# A tiny classifier (2 blocks, a learned vocabulary) saved while kbert's
# blocks were keras-hub's `TransformerEncoder` (kbert 0.4's layout).
SAVED_WITH_KERAS_HUB_BLOCKS = pathlib.Path(__file__).parent / "files" / "classifier_with_keras_hub_blocks.keras"


# The blocks' groups as kbert 0.4 named them (by its block class, `LeanTransformerEncoder`), and now.
OLD_BLOCK_GROUPS = {"lean_transformer_encoder": "transformer_block", "lean_transformer_encoder_1": "transformer_block_1"}


def weights_by_path(path, renamed=None):
    """Every array of a `.keras` file's weights, by its path in the file (with `renamed` groups renamed)."""
    renamed = renamed or {}
    arrays = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset):
            arrays["/".join(renamed.get(part, part) for part in name.split("/"))] = item[()]

    with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as weights:
        weights.visititems(keep)
    return arrays


def test_a_file_with_keras_hub_blocks_loads_with_every_weight_it_holds(tmp_path):
    digest = hashlib.sha256(SAVED_WITH_KERAS_HUB_BLOCKS.read_bytes()).hexdigest()
    assert has_old_block_layout(SAVED_WITH_KERAS_HUB_BLOCKS)
    model = kbert.load_model(SAVED_WITH_KERAS_HUB_BLOCKS)
    assert isinstance(model, kbert.Classifier)
    assert model.predict(["a good film", "the plot was dull"], verbose=0).shape == (2, 2)

    # Saved again, it holds the same arrays, its blocks' under today's names.
    model.save(tmp_path / "again.keras")
    # (The layers' weights: the optimizer's were not built when it was saved.)
    renamed = {**KERAS_HUB_BLOCK_ATTRIBUTES, **OLD_BLOCK_GROUPS}
    expected = {name: value for name, value in weights_by_path(SAVED_WITH_KERAS_HUB_BLOCKS, renamed=renamed).items()
                if name.startswith("layers/")}
    got = {name: value for name, value in weights_by_path(tmp_path / "again.keras").items()
           if name.startswith("layers/")}
    assert sorted(got) == sorted(expected)
    assert any("/self_attention_layer/query_dense/" in name for name in got)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    # The user's file is read, never written.
    assert hashlib.sha256(SAVED_WITH_KERAS_HUB_BLOCKS.read_bytes()).hexdigest() == digest


def test_the_upgraded_copy_keeps_every_other_member(tmp_path):
    copy = upgrade_block_layout(str(SAVED_WITH_KERAS_HUB_BLOCKS), str(tmp_path))
    assert not has_old_block_layout(copy)
    with zipfile.ZipFile(SAVED_WITH_KERAS_HUB_BLOCKS) as original, zipfile.ZipFile(copy) as upgraded:
        assert original.namelist() == upgraded.namelist()
        for name in original.namelist():
            if name != "model.weights.h5":
                assert upgraded.read(name) == original.read(name)
    assert sorted(tmp_path.iterdir()) == [tmp_path / SAVED_WITH_KERAS_HUB_BLOCKS.name]


def test_files_saved_now_need_no_upgrade(tmp_path):
    encoder = kbert.Encoder(vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                            max_sequence_length=8)
    encoder.save(tmp_path / "encoder.keras")
    assert not has_old_block_layout(tmp_path / "encoder.keras")
    # Keras' own loader reads them as they are.
    restored = keras.saving.load_model(tmp_path / "encoder.keras")
    for ours, theirs in zip(encoder.weights, restored.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs))


def test_a_file_without_weights_needs_no_upgrade(tmp_path):
    with zipfile.ZipFile(tmp_path / "config_only.keras", "w") as archive:
        archive.writestr("config.json", "{}")
    assert not has_old_block_layout(tmp_path / "config_only.keras")


def with_the_old_class_names(path, copy):
    """A copy of a `.keras` file saved now, with the names kbert 0.4 gave its classes and its blocks' groups."""
    with zipfile.ZipFile(path) as archive, zipfile.ZipFile(copy, "w") as old:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "config.json":
                data = data.replace(b'"TextPacker"', b'"Preprocessor"').replace(b'"kbert>TextPacker"',
                                                                              b'"kbert>Preprocessor"')
            elif info.filename == "model.weights.h5":
                buffer = io.BytesIO(data)
                with h5py.File(buffer, "r+") as weights:
                    groups = []
                    weights.visit(lambda name: groups.append(name) if name.rsplit("/", 1)[-1].startswith(
                        "transformer_block") else None)
                    for group in groups:
                        parent, name = group.rsplit("/", 1)
                        weights[parent].move(name, name.replace("transformer_block", "lean_transformer_encoder"))
                data = buffer.getvalue()
            old.writestr(info, data)


def test_a_file_naming_the_old_classes_loads_under_the_new_names(tmp_path):
    from tests.test_case import tiny_classifier

    model = tiny_classifier(dropout=0.0)
    model.save(tmp_path / "now.keras")
    with_the_old_class_names(tmp_path / "now.keras", tmp_path / "old.keras")
    assert b"kbert>Preprocessor" in zipfile.ZipFile(tmp_path / "old.keras").read("config.json")
    assert has_old_block_layout(tmp_path / "old.keras")
    restored = kbert.load_model(str(tmp_path / "old.keras"))
    assert isinstance(restored.preprocessor.packer, kbert.TextPacker)
    texts = ["the cat sat on the mat", "a good film"]
    np.testing.assert_array_equal(restored.predict(texts, verbose=0), model.predict(texts, verbose=0))
