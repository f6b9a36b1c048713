import collections
import json
import math
import random
import warnings

import numpy as np
import pytest

import kbert
from kbert.data import DataFormatError
from kbert.pretraining import prepared_pairs
from kbert.pretraining.dataset import EpochCounter, prepare_pretraining_data, pretraining_dataset
from tests.preprocessing.conftest import assert_packed, bert_vocabulary_path
from tests.test_case import folder_state

WORDS = (
    "the a cat dog sat on mat good bad film free prize now see you soon cats dogs "
    "sitting walked running quickly slowly river mountain house garden"
).split()
SEQUENCE_LENGTH = 32
BATCH_SIZE = 8
SEED = 3


def write_corpus(folder, files=4, sentences=15, seed=0):
    """Files of generated sentences, one a line: each file is one document."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = []
        for _ in range(sentences):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
            lines.append(" ".join(words).capitalize() + rng.choice(".!?"))
        (folder / f"doc{f}.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("pretraining") / "corpus")


@pytest.fixture(scope="module")
def vocabulary(corpus):
    return kbert.learn_vocabulary(files=[str(corpus / "*.txt")], vocabulary_size=60, verbose=False)


@pytest.fixture(scope="module")
def tokenizer(vocabulary):
    return kbert.Tokenizer(vocabulary)


def make_dataset(corpus, vocabulary, **kwargs):
    kwargs.setdefault("sequence_length", SEQUENCE_LENGTH)
    kwargs.setdefault("batch_size", BATCH_SIZE)
    kwargs.setdefault("seed", SEED)
    kwargs.setdefault("verbose", False)
    return pretraining_dataset(str(corpus), vocabulary=vocabulary, **kwargs)


def as_numpy(batches):
    return [tuple({k: v.numpy() for k, v in part.items()} for part in batch) for batch in batches]


@pytest.fixture(scope="module")
def text_dataset(corpus, vocabulary):
    return make_dataset(corpus, vocabulary)


@pytest.fixture(scope="module")
def epochs(text_dataset):
    """Two passes over the text dataset: epochs 0 and 1."""
    return [as_numpy(text_dataset), as_numpy(text_dataset)]


def assert_same_batches(first, second):
    assert len(first) == len(second)
    for batch_a, batch_b in zip(first, second):
        for part_a, part_b in zip(batch_a, batch_b):
            assert part_a.keys() == part_b.keys()
            for name in part_a:
                np.testing.assert_array_equal(part_a[name], part_b[name], err_msg=name)


def unmasked(batch):
    """The token ids before masking: `mask_ids` put back at `mask_positions`."""
    x, y, weights = batch
    token_ids = x["token_ids"].copy()
    for row in range(len(token_ids)):
        real = weights["mlm"][row] == 1
        token_ids[row, x["mask_positions"][row][real]] = y["mlm"][row][real]
    return token_ids


def unmasked_inputs(batch):
    x = batch[0]
    return {
        "token_ids": unmasked(batch),
        "segment_ids": x["segment_ids"],
        "padding_mask": x["padding_mask"],
    }


def examples(batches):
    """Each example's unmasked ids, segment ids and label: a multiset."""
    found = collections.Counter()
    for batch in batches:
        x, y, _ = batch
        labels = y["nsp"] if "nsp" in y else [None] * len(x["token_ids"])
        for ids, segments, label in zip(unmasked(batch), x["segment_ids"], labels):
            found[(tuple(ids.tolist()), tuple(segments.tolist()), label)] += 1
    return found


def masks(batches):
    return [
        (tuple(ids.tolist()), tuple(masked.tolist()))
        for batch in batches
        for ids, masked in zip(unmasked(batch), batch[0]["token_ids"])
    ]


# The text path


def test_batches_have_the_keys_shapes_and_dtypes(epochs, text_dataset):
    batches = epochs[0]
    max_predictions = math.ceil(SEQUENCE_LENGTH * 0.15)
    x, y, weights = batches[0]
    assert sorted(x) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    assert sorted(y) == ["mlm", "nsp"] and sorted(weights) == ["mlm", "nsp"]
    for batch in batches:
        x, y, weights = batch
        size = len(x["token_ids"])
        for name in ("token_ids", "segment_ids", "padding_mask"):
            assert x[name].shape == (size, SEQUENCE_LENGTH) and x[name].dtype == np.int32
        assert x["mask_positions"].shape == (size, max_predictions)
        assert x["mask_positions"].dtype == np.int32
        assert y["mlm"].shape == (size, max_predictions) and y["mlm"].dtype == np.int32
        assert weights["mlm"].shape == (size, max_predictions)
        assert weights["mlm"].dtype == np.float32
        assert y["nsp"].shape == (size,) and y["nsp"].dtype == np.int32
        assert set(y["nsp"].tolist()) <= {0, 1}
        np.testing.assert_array_equal(weights["nsp"], np.ones(size, np.float32))
    # The dataset's element spec says the same.
    x_spec, y_spec, _ = text_dataset.element_spec
    assert x_spec["token_ids"].shape.as_list() == [None, SEQUENCE_LENGTH]


def test_examples_are_packed_cls_a_sep_b_sep(epochs, tokenizer):
    labels = []
    for batch in epochs[0]:
        x, y, _ = batch
        original = unmasked(batch)
        assert_packed(unmasked_inputs(batch), SEQUENCE_LENGTH, tokenizer, num_segments=2)
        for ids, segments, mask in zip(original, x["segment_ids"], x["padding_mask"]):
            length = int(mask.sum())
            seps = np.flatnonzero(ids == tokenizer.sep_token_id).tolist()
            # Exactly two [SEP]: after A (segment 0) and after B (segment 1).
            assert len(seps) == 2 and seps[1] == length - 1 and 1 < seps[0] < length - 2
            np.testing.assert_array_equal(segments[: seps[0] + 1], 0)
            np.testing.assert_array_equal(segments[seps[0] + 1 : length], 1)
            inside = [tokenizer.cls_token_id, tokenizer.pad_token_id]
            assert not np.isin(ids[1:length], inside).any()
        labels.extend(y["nsp"].tolist())
    assert 0 < sum(labels) < len(labels)  # both labels occur


def test_masks_choose_text_tokens_only(epochs, tokenizer):
    specials = tokenizer.special_token_ids
    chosen = text_tokens = 0
    for batch in epochs[0]:
        x, y, weights = batch
        original = unmasked(batch)
        for row in range(len(original)):
            real = weights["mlm"][row] == 1
            positions = x["mask_positions"][row][real]
            assert not np.isin(original[row][positions], specials).any()
            assert (x["mask_positions"][row][~real] == 0).all()
            assert (y["mlm"][row][~real] == 0).all()
            selectable = int((~np.isin(original[row], specials)).sum())
            expected = min(math.ceil(np.float32(selectable) * np.float32(0.15)), 5)
            assert real.sum() == expected
            # Only chosen positions differ from the original.
            changed = np.flatnonzero(x["token_ids"][row] != original[row])
            assert set(changed.tolist()) <= set(positions.tolist())
            chosen += real.sum()
            text_tokens += selectable
    assert (x["token_ids"] == tokenizer.mask_token_id).any()
    assert 0.15 <= chosen / text_tokens < 0.25


def test_cardinality_and_number_of_batches(epochs, text_dataset):
    num_examples = text_dataset.kbert_num_examples
    assert num_examples == sum(len(batch[0]["token_ids"]) for batch in epochs[0]) > BATCH_SIZE
    assert int(text_dataset.cardinality()) == math.ceil(num_examples / BATCH_SIZE) == len(epochs[0])
    assert len(epochs[1]) == len(epochs[0])
    assert [len(b[0]["token_ids"]) for b in epochs[0][:-1]] == [BATCH_SIZE] * (len(epochs[0]) - 1)


def test_same_seed_same_batches(epochs, corpus, vocabulary):
    assert_same_batches(as_numpy(make_dataset(corpus, vocabulary)), epochs[0])


def test_other_seed_other_batches(epochs, corpus, vocabulary):
    other = make_dataset(corpus, vocabulary, seed=SEED + 1, count_examples=False)
    assert other.kbert_num_examples is None
    first = as_numpy(other.take(1))[0]
    assert examples([first]) != examples(epochs[0][:1])


def test_each_epoch_has_the_same_pairs_with_new_masks(epochs):
    assert examples(epochs[1]) == examples(epochs[0])
    masks_0, masks_1 = masks(epochs[0]), masks(epochs[1])
    assert sorted(masks_0) != sorted(masks_1)
    # The same example is masked differently in most cases.
    by_example = dict(masks_0)
    differ = sum(by_example[ids] != masked for ids, masked in masks_1 if ids in by_example)
    assert differ > 0.8 * len(masks_1)


def test_resetting_the_epoch_counter_replays_an_epoch(epochs, text_dataset):
    counter = text_dataset.kbert_epoch_counter
    assert isinstance(counter, EpochCounter)
    assert counter.next_epoch >= 2
    counter.next_epoch = 0
    assert_same_batches(as_numpy(text_dataset), epochs[0])
    assert counter.next_epoch == 1


def test_without_next_sentence(corpus, vocabulary, tokenizer):
    dataset = make_dataset(corpus, vocabulary, next_sentence=False, shuffle_buffer=0)
    batches = as_numpy(dataset)
    assert dataset.kbert_num_examples == sum(len(b[0]["token_ids"]) for b in batches)
    for batch in batches:
        x, y, weights = batch
        assert sorted(y) == ["mlm"] and sorted(weights) == ["mlm"]
        assert (x["segment_ids"] == 0).all()
        original = unmasked(batch)
        assert_packed(unmasked_inputs(batch), SEQUENCE_LENGTH, tokenizer)
        assert ((original == tokenizer.sep_token_id).sum(axis=1) == 1).all()


# Prepared TFRecords


def test_prepared_folder_gives_the_same_batches_as_the_text(tmp_path, corpus, vocabulary, epochs):
    folder = tmp_path / "prepared"
    metadata = prepare_pretraining_data(
        [str(corpus)], folder, vocabulary, sequence_length=SEQUENCE_LENGTH, seed=SEED,
        examples_per_shard=10, verbose=False,
    )
    num_examples = sum(len(b[0]["token_ids"]) for b in epochs[0])
    assert metadata["num_examples"] == num_examples
    shards = [f"pairs-{i:05d}.tfrecord" for i in range(math.ceil(num_examples / 10))]
    assert metadata["shards"] == shards
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(shards + ["metadata.json", "vocab.txt"])
    assert json.loads((folder / "metadata.json").read_text()) == metadata
    assert (folder / "vocab.txt").read_text().splitlines() == vocabulary
    # Nothing else was left next to it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared"]

    dataset = pretraining_dataset(str(folder), batch_size=BATCH_SIZE, seed=SEED)
    assert dataset.kbert_num_examples == num_examples
    assert int(dataset.cardinality()) == len(epochs[0])
    assert_same_batches(as_numpy(dataset), epochs[0])
    assert_same_batches(as_numpy(dataset), epochs[1])


def prepare(corpus, vocabulary, folder, **kwargs):
    kwargs.setdefault("sequence_length", SEQUENCE_LENGTH)
    kwargs.setdefault("verbose", False)
    return prepare_pretraining_data([str(corpus)], folder, vocabulary, **kwargs)


def test_prepare_refuses_an_existing_folder_unless_overwrite(tmp_path, corpus, vocabulary):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "old.txt").write_text("old")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        prepare(corpus, vocabulary, folder)
    # Overwriting replaces only a folder of prepared data.
    with pytest.raises(ValueError, match="not a folder of kbert pretraining data"):
        prepare(corpus, vocabulary, folder, overwrite=True)
    assert (folder / "old.txt").read_text() == "old"
    prepared = tmp_path / "prepared"
    first = prepare(corpus, vocabulary, prepared, seed=1)
    metadata = prepare(corpus, vocabulary, prepared, overwrite=True)
    assert (metadata["seed"], first["seed"]) == (0, 1)
    assert json.loads((prepared / "metadata.json").read_text())["seed"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "prepared"]  # nothing left aside
    # Nor one that holds its own corpus.
    (prepared / "book.txt").write_text("the cat sat on the mat . the dog sat .\n" * 20)
    with pytest.raises(ValueError, match="an input of this preparation"):
        prepare(prepared / "book.txt", vocabulary, prepared, overwrite=True)
    assert (prepared / "book.txt").exists()


def test_prepare_takes_settings_and_leaves_masking_to_the_reader(tmp_path, corpus, vocabulary):
    settings = kbert.PretrainingSettings(sequence_length=SEQUENCE_LENGTH, seed=3, verbose=False)
    metadata = prepare_pretraining_data([str(corpus)], tmp_path / "a", vocabulary, settings)
    assert (metadata["sequence_length"], metadata["seed"]) == (SEQUENCE_LENGTH, 3)
    with pytest.raises(ValueError, match="`seed=4` conflicts"):
        prepare_pretraining_data([str(corpus)], tmp_path / "b", vocabulary, settings, seed=4)
    with pytest.raises(ValueError, match="`mask_rate` is a setting of the reader"):
        prepare(corpus, vocabulary, tmp_path / "c", mask_rate=0.2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


@pytest.mark.parametrize("shard", ["/etc/passwd", "../pairs-00000.tfrecord", "gs://bucket/pairs-00000.tfrecord"])
def test_a_prepared_folder_is_read_from_itself_only(tmp_path, corpus, vocabulary, shard):
    """Its metadata.json cannot make the reader open a path or URL named there."""
    folder = tmp_path / "prepared"
    prepare(corpus, vocabulary, folder)
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["shards"][0] = shard
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=f"the shard '{shard}' is not a shard file name of the folder"):
        pretraining_dataset(str(folder), seed=SEED)


def test_failure_while_writing_leaves_nothing(tmp_path, corpus, vocabulary, monkeypatch):
    prepare(corpus, vocabulary, tmp_path / "prepared")
    before = folder_state(tmp_path)
    written = []

    def failing_example(segment_a, segment_b, label):
        if len(written) == 5:
            raise OSError("disk full")
        written.append(label)
        return b""

    monkeypatch.setattr(prepared_pairs, "_pair_example", failing_example)
    with pytest.raises(OSError, match="disk full"):
        prepare(corpus, vocabulary, tmp_path / "out", examples_per_shard=2)
    assert len(written) == 5
    assert folder_state(tmp_path) == before
    # An existing folder being replaced stays as it was.
    written.clear()
    with pytest.raises(OSError, match="disk full"):
        prepare(corpus, vocabulary, tmp_path / "prepared", overwrite=True)
    assert folder_state(tmp_path) == before


def test_prepared_folder_rejects_other_settings(tmp_path, corpus, vocabulary):
    folder = tmp_path / "prepared"
    prepare(corpus, vocabulary, folder)
    with pytest.raises(ValueError, match="sequence_length=32.*sequence_length=64"):
        pretraining_dataset(str(folder), sequence_length=64)
    with pytest.raises(ValueError, match="next_sentence"):
        pretraining_dataset(str(folder), next_sentence=False)
    with pytest.raises(ValueError, match="vocabulary"):
        pretraining_dataset(str(folder), vocabulary=vocabulary + ["extra"])
    # The same settings, said explicitly, are fine.
    dataset = pretraining_dataset(
        str(folder), sequence_length=SEQUENCE_LENGTH, vocabulary=vocabulary, count_examples=False
    )
    assert dataset.element_spec[0]["token_ids"].shape.as_list() == [None, SEQUENCE_LENGTH]


def test_prepared_folder_of_another_format_is_rejected(tmp_path, corpus, vocabulary):
    folder = tmp_path / "prepared"
    prepare(corpus, vocabulary, folder)
    metadata = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**metadata, "format": "other/9"}))
    with pytest.raises(ValueError, match="not kbert pretraining data"):
        pretraining_dataset(str(folder))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus, vocabulary):
    """A prepared folder of several shards, to copy and damage."""
    folder = tmp_path_factory.mktemp("prepared") / "prepared"
    prepare(corpus, vocabulary, folder, examples_per_shard=10)
    return folder


def damaged_copy(prepared, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(prepared, folder)
    return folder


def rewrite_records(shard, keep):
    """Writes the first `keep` records of a shard again, alone: a shard cut at the end of a record."""
    import tensorflow as tf

    records = [record.numpy() for record in tf.data.TFRecordDataset(str(shard))]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records[:keep]:
            writer.write(record)


@pytest.mark.parametrize("damage", ["truncated", "cut_at_a_record", "grown", "missing"])
def test_a_damaged_shard_is_refused_in_one_line_before_reading(tmp_path, prepared, damage, monkeypatch):
    folder = damaged_copy(prepared, tmp_path)
    metadata = json.loads((folder / "metadata.json").read_text())
    assert len(metadata["shards"]) >= 2 and metadata["shard_bytes"] == [
        (folder / name).stat().st_size for name in metadata["shards"]]
    shard = folder / metadata["shards"][1]
    if damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:100])
    elif damage == "cut_at_a_record":
        rewrite_records(shard, keep=3)
    elif damage == "grown":
        shard.write_bytes(shard.read_bytes() * 2)
    else:
        shard.unlink()
    # Refused before any record is read.
    monkeypatch.setattr(prepared_pairs.tf.data, "TFRecordDataset", lambda *a, **k: pytest.fail("a shard was read"))
    with pytest.raises(ValueError) as error:
        pretraining_dataset(str(folder), seed=SEED)
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(shard))
    expected = {"truncated": "was cut short", "cut_at_a_record": "was cut short", "grown": "was changed",
                "missing": "is missing: "}[damage]
    assert expected in message and "prepare the corpus again" in message


def test_a_corrupt_shard_is_named_by_unreadable_shard(tmp_path, prepared):
    folder = damaged_copy(prepared, tmp_path)
    assert prepared_pairs.unreadable_shard(folder) is None
    shard = folder / "pairs-00001.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size: only reading finds it
    shard.write_bytes(bytes(data))
    prepared_pairs.check_shards(folder)
    line = prepared_pairs.unreadable_shard(folder)
    assert line.startswith(f"{shard}: record ") and "cannot be read (corrupted record at " in line
    assert "\n" not in line and "{{" not in line


@pytest.mark.parametrize("damage", ["truncated", "no_length", "shard_bytes", "num_examples"])
def test_a_broken_metadata_json_names_its_file_and_key(tmp_path, prepared, damage):
    folder = damaged_copy(prepared, tmp_path)
    path = folder / "metadata.json"
    metadata = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:60])
    elif damage == "no_length":
        del metadata["sequence_length"]
        path.write_text(json.dumps(metadata))
    elif damage == "shard_bytes":
        metadata["shard_bytes"] = metadata["shard_bytes"][:-1]
        path.write_text(json.dumps(metadata))
    else:
        metadata["num_examples"] += 1
        path.write_text(json.dumps(metadata))
    with pytest.raises(ValueError) as error:
        pretraining_dataset(str(folder), seed=SEED)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    expected = {"truncated": "not the JSON that kbert prepare-pretraining writes",
                "no_length": "the key 'sequence_length' is missing", "shard_bytes": "the key 'shard_bytes' is not",
                "num_examples": "the key 'num_examples' is "}[damage]
    assert expected in message


def test_a_folder_of_an_earlier_version_is_read_with_a_warning(tmp_path, prepared):
    folder = damaged_copy(prepared, tmp_path)
    metadata = json.loads((folder / "metadata.json").read_text())
    del metadata["shard_bytes"]  # as kbert wrote it before the sizes were recorded
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.warns(UserWarning, match="records no shard sizes in bytes"):
        dataset = pretraining_dataset(str(folder), seed=SEED, batch_size=BATCH_SIZE)
    assert dataset.num_examples == metadata["num_examples"]
    (folder / metadata["shards"][0]).unlink()
    with pytest.raises(ValueError, match="pairs-00000.tfrecord is missing"):
        pretraining_dataset(str(folder), seed=SEED)


# Bad input


def test_empty_and_binary_files_are_skipped_and_reported(tmp_path, vocabulary, capsys):
    corpus = write_corpus(tmp_path / "corpus", files=2)
    (corpus / "empty.txt").write_text("")
    (corpus / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    dataset = make_dataset(corpus, vocabulary, verbose=True)
    summary = capsys.readouterr().err
    assert "4 file(s), 2 documents" in summary
    assert "1 empty file(s)" in summary and "empty.txt" in summary
    assert "1 binary file(s)" in summary and "image.png" in summary
    assert "% NotNext" in summary
    assert dataset.kbert_num_examples > 0


def test_non_utf8_file_names_file_and_line(tmp_path, vocabulary):
    corpus = write_corpus(tmp_path / "corpus", files=2)
    bad = corpus / "latin1.txt"
    bad.write_bytes(b"A good line.\nAnother.\nCaf\xe9 au lait.\n")
    with pytest.raises(DataFormatError, match=r"latin1\.txt, line 3: invalid UTF-8"):
        make_dataset(corpus, vocabulary)
    with pytest.raises(DataFormatError, match=r"latin1\.txt, line 3"):
        prepare(corpus, vocabulary, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_sequence_too_short_for_a_pair(corpus, vocabulary):
    with pytest.raises(ValueError, match="at least 5"):
        make_dataset(corpus, vocabulary, sequence_length=4)


def test_one_sentence_corpus_has_no_examples(tmp_path, vocabulary, capsys):
    # One token: nothing to cut into two segments, and no other document.
    (tmp_path / "one.txt").write_text("A\n")
    with pytest.raises(ValueError, match="no pretraining examples.*one-token chunk"):
        make_dataset(tmp_path / "one.txt", vocabulary)
    with pytest.raises(ValueError, match="no pretraining examples"):
        prepare(tmp_path / "one.txt", vocabulary, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.txt"]


def test_missing_corpus_and_vocabulary(tmp_path, vocabulary):
    with pytest.raises(FileNotFoundError, match="nothing"):
        make_dataset(tmp_path / "nothing*.txt", vocabulary)
    with pytest.raises(ValueError, match="vocabulary"):
        pretraining_dataset(str(tmp_path), verbose=False)


# Real text


def test_real_book_next_sentence_share_and_mask_rate(capsys):
    book = kbert.data.data_dir() / "gutenberg" / "pg11.txt"
    if not book.is_file():
        pytest.skip(f"{book} is missing; set KBERT_DATA to the data folder.")
    tokenizer = kbert.Tokenizer(bert_vocabulary_path())
    dataset = pretraining_dataset(
        str(book), tokenizer=tokenizer, sequence_length=128, batch_size=128, seed=0
    )
    assert "1 file(s)" in capsys.readouterr().err
    labels, chosen, text_tokens = [], 0, 0
    for batch in as_numpy(dataset):
        _, y, weights = batch
        original = unmasked(batch)
        labels.extend(y["nsp"].tolist())
        chosen += weights["mlm"].sum()
        text_tokens += (~np.isin(original, tokenizer.special_token_ids)).sum()
    assert len(labels) == dataset.kbert_num_examples > 300
    assert 0.4 <= np.mean(labels) <= 0.6
    assert 0.14 <= chosen / text_tokens <= 0.165


def test_a_one_file_corpus_warns_that_nsp_gets_no_not_next_pairs(tmp_path, vocabulary):
    one_file = write_corpus(tmp_path / "one", files=1)
    with pytest.warns(UserWarning, match=r"one document.*`objective` 'none'"):
        make_dataset(one_file, vocabulary)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_dataset(one_file, vocabulary, next_sentence=False)


def test_progress_rewrites_one_line_on_a_terminal_and_appends_lines_elsewhere(monkeypatch):
    import io

    from kbert.pretraining import corpus_progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(corpus_progress, "_TERMINAL_INTERVAL", 0.0)
    monkeypatch.setattr(corpus_progress, "_PLAIN_INTERVAL", 0.0)
    outputs = {}
    for name, stream in (("terminal", Terminal()), ("file", io.StringIO())):
        count = 0
        progress = corpus_progress.Progress(lambda: f"pairs {count:,}" + " done" * (count == 1000), stream=stream)
        for count in (1, 10, 1000):
            progress.show()
        progress.finish()
        outputs[name] = stream.getvalue()
    assert outputs["file"].splitlines() == [
        "pairs 1 (0 s)", "pairs 10 (0 s)", "pairs 1,000 done (0 s)", "pairs 1,000 done (0 s)"]
    terminal = outputs["terminal"]
    assert terminal.count("\n") == 1 and terminal.endswith("\n") and "\x1b[" not in terminal
    assert terminal.split("\r")[1:] == ["pairs 1 (0 s)", "pairs 10 (0 s)", "pairs 1,000 done (0 s)",
                                        "pairs 1,000 done (0 s)\n"]
    # Quiet: nothing at all.
    quiet = io.StringIO()
    corpus_progress.Progress(lambda: "x", verbose=False, stream=quiet).finish()
    assert quiet.getvalue() == ""


# Sentence-order prediction and n-gram masking

ORDERED_WORDS = [f"w{i}" for i in range(120)]
ORDERED_VOCABULARY = list(kbert.SPECIAL_TOKENS) + ORDERED_WORDS + ["."]


def write_ordered_corpus(folder):
    """Two files whose words are w0 ... w59 and w60 ... w119 in reading order, so a
    token id tells the document and the place in it; sentences of 1 to 5 words."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    for document in range(2):
        words, sentences = ORDERED_WORDS[60 * document : 60 * (document + 1)], []
        while words:
            size = rng.randint(1, 5)
            sentences.append(" ".join(words[:size]) + " .")
            words = words[size:]
        (folder / f"doc{document}.txt").write_text(" ".join(sentences) + "\n")
    return folder


def test_sop_examples_are_one_documents_segments_in_order_or_swapped(tmp_path):
    corpus = write_ordered_corpus(tmp_path / "ordered")
    dataset = make_dataset(corpus, ORDERED_VOCABULARY, objective="sop", sequence_length=16,
                           short_sequence_rate=0.0)
    assert dataset.kbert_objective == "sop"
    period = ORDERED_VOCABULARY.index(".")
    labels = []
    for batch in as_numpy(dataset):
        x, y, weights = batch
        assert sorted(y) == ["mlm", "sop"] and sorted(weights) == ["mlm", "sop"]
        for ids, segments, label in zip(unmasked(batch), x["segment_ids"], y["sop"]):
            words = (ids >= 5) & (ids != period)
            first = ids[words & (segments == 0)] - 5
            second = ids[words & (segments == 1)] - 5
            assert len(first) and len(second)
            assert len(set((np.concatenate([first, second]) // 60).tolist())) == 1  # one document
            if label == 0:
                assert first.max() < second.min()
            else:
                assert first.min() > second.max()
            labels.append(int(label))
    assert 0 < sum(labels) < len(labels)


def test_prepared_folder_keeps_its_objective(tmp_path, corpus, vocabulary):
    folder = tmp_path / "sop"
    metadata = prepare(corpus, vocabulary, folder, objective="sop", seed=SEED)
    assert metadata["objective"] == "sop" and metadata["next_sentence"] is False
    text = make_dataset(corpus, vocabulary, objective="sop")
    # Read without naming the objective, the folder gives its own: the text's batches.
    prepared = pretraining_dataset([str(folder)], batch_size=BATCH_SIZE, seed=SEED)
    assert prepared.kbert_objective == "sop"
    assert_same_batches(as_numpy(prepared), as_numpy(text))
    with pytest.raises(ValueError, match="prepared for objective='sop'; got objective='nsp'"):
        pretraining_dataset(str(folder), objective="nsp")
    with pytest.raises(ValueError, match=r"objective='none' \(next_sentence=False\)"):
        pretraining_dataset(str(folder), next_sentence=False)
    # Folders written before objectives existed say next_sentence only.
    older = {k: v for k, v in metadata.items() if k not in ("objective", "sentence_order_rate")}
    (folder / "metadata.json").write_text(json.dumps({**older, "next_sentence": False}))
    assert pretraining_dataset(str(folder), count_examples=False).kbert_objective == "none"


def test_a_pretrainer_refuses_data_of_another_objective(text_dataset):
    pretrainer = kbert.Pretrainer(kbert.Encoder.from_preset(
        "tiny", vocabulary_size=60, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
    ), objective="sop")
    with pytest.raises(ValueError, match=r"made for objective='nsp'.*objective='sop'"):
        pretrainer.fit(text_dataset, epochs=1, verbose=0)


def test_ngram_masking_in_the_pipeline_masks_whole_words(corpus, vocabulary, tokenizer):
    dataset = make_dataset(corpus, vocabulary, max_ngram=3, sequence_length=64)
    continuation = set(tokenizer.continuation_ids())
    chosen = text_tokens = 0
    for batch in as_numpy(dataset):
        x, _, weights = batch
        original = unmasked(batch)
        for row in range(len(original)):
            positions = set(x["mask_positions"][row][weights["mlm"][row] == 1].tolist())
            for position in positions:
                # A chosen piece's whole word is chosen with it. (Truncation
                # can leave a piece first in its segment, after [SEP].)
                after_special = original[row][position - 1] in tokenizer.special_token_ids
                if original[row][position] in continuation and not after_special:
                    assert position - 1 in positions
                if position + 1 < 64 and original[row][position + 1] in continuation:
                    assert position + 1 in positions
            chosen += len(positions)
            text_tokens += int((~np.isin(original[row], tokenizer.special_token_ids)).sum())
    assert 0.1 < chosen / text_tokens <= 0.16
