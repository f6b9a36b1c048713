"""`kbert.export`: a task model as a versioned SavedModel that TF Serving serves on raw text."""

import os
import re
import shutil
import tempfile

import tensorflow as tf

from kbert.serving.serving_module import ServingModule

_VERSION = re.compile(r"^[0-9]+$")


def export(model, directory, version=None, overwrite=False, text_pairs=None):
    """Exports a task model for TF Serving, as `directory/<version>/`.

    The SavedModel takes raw strings: tokenization runs inside the graph with
    core TensorFlow and TF-Text ops that TF Serving's model server has (see
    `kbert.serving.check_ops`), so a client sends plain text. Its vocabulary
    is the asset `assets/vocab.txt`; no path of this machine is stored.

    Signatures (inputs are batches, outputs dicts of named tensors):

    - `serving_default`, on raw text:
      - `Classifier`: `text` (and `text_pair` for a pair model) ->
        `probabilities` `(batch, classes)`, `label_ids` `(batch,)`, and
        `labels` (class names) when the model has `class_names`;
      - `Embedder`: `text` (and `text_pair`) -> `sentence_embedding`;
      - `Tagger`: `text` -> per word, padded to the batch's most words:
        `words`, `tags`, `tag_ids` (-1 on padding), `scores` (the tag's
        probability), `word_starts`, `word_ends` (character offsets in the
        text); and `word_counts`. Words are split as the tokenizer splits
        them: on whitespace, each punctuation mark a word of its own;
      - `QuestionAnswerer`: `question`, `context` -> `text`, `start`,
        `end` (character offsets in the context), `score`, and the n-best
        `candidate_texts`, `candidate_starts`, `candidate_ends`,
        `candidate_scores`, `candidate_counts`;
      - `MultipleChoice`: `context`, `choices` `(batch, num_choices)` ->
        `probabilities`, `choice_ids`;
    - `from_token_ids`: `token_ids`, `segment_ids`, `padding_mask` ->
      the same outputs for classifiers, embedders and multiple choice;
      per-token `tag_ids`, `tags`, `probabilities` for a tagger;
      `start_logits`, `end_logits` for question answering;
    - `from_tf_example`: `examples`, serialized `tf.train.Example`s with
      bytes features named as `serving_default`'s inputs -> its outputs.

    The version folder appears complete or not at all: the SavedModel is
    written to a hidden folder beside it (TF Serving skips names that are
    not numbers) and renamed into place, so a model server polling
    `directory` never loads half a model.

    Args:
        model: a kbert task model.
        directory: the model's folder, e.g. `"saved_models/spam"`.
        version: a positive integer; default one more than the highest
            version in `directory` (1 for the first).
        overwrite: replace an existing version (it is moved aside first,
            then deleted once the new one is in place).
        text_pairs: for a classifier or embedder, whether it takes text
            pairs; default: what the model was trained or used on.

    Returns:
        The path of the version folder.

    Example:
    >>> vocab = kbert.learn_vocabulary(["a good film", "a bad film"] * 10, vocabulary_size=40,
    ...                                verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> path = kbert.export(clf, os.path.join(folder, "films"), text_pairs=False)
    >>> os.path.basename(path)
    '1'
    >>> served = tf.saved_model.load(path).signatures["serving_default"]
    >>> served(text=tf.constant(["a good film"]))["probabilities"].shape
    TensorShape([1, 2])
    """
    directory = os.fspath(directory)
    module = ServingModule(model, text_pairs=text_pairs)  # fails early on a model it cannot serve
    os.makedirs(directory, exist_ok=True)
    version = _choose_version(directory, version)
    target = os.path.join(directory, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(
            f"{target} exists; export to another version, or pass overwrite=True to replace it."
        )
    staging = tempfile.mkdtemp(prefix=f".{version}.partial-", dir=directory)
    try:
        tf.saved_model.save(module, staging, signatures=module.signatures())
        _move_into_place(staging, target, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def versions(directory):
    """The version numbers in a model folder, ascending (what TF Serving would see)."""
    if not os.path.isdir(directory):
        return []
    return sorted(
        int(name) for name in os.listdir(directory)
        if _VERSION.match(name) and os.path.isdir(os.path.join(directory, name))
    )


def latest_version(directory):
    """The highest version folder of a model folder; a SavedModel folder itself is returned as is."""
    directory = os.fspath(directory)
    if os.path.exists(os.path.join(directory, "saved_model.pb")):
        return directory
    found = versions(directory)
    if not found:
        raise FileNotFoundError(
            f"No SavedModel in {directory}: expected saved_model.pb or numbered version folders "
            "(as kbert.export writes them)."
        )
    return os.path.join(directory, str(found[-1]))


def _choose_version(directory, version):
    if version is None:
        return (versions(directory) or [0])[-1] + 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"`version` must be a positive integer, got {version!r}.")
    return version


def _move_into_place(staging, target, overwrite):
    old = None
    if overwrite and os.path.exists(target):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.old-", dir=os.path.dirname(target))
        os.rename(target, os.path.join(old, "saved_model"))
    try:
        os.rename(staging, target)
    except OSError as error:
        if old is not None:  # put the old version back
            os.rename(os.path.join(old, "saved_model"), target)
            shutil.rmtree(old, ignore_errors=True)
        raise FileExistsError(f"Could not move the export into {target}: {error}") from error
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
