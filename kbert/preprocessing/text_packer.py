"""Raw text (single texts or pairs) to BERT's model inputs."""

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from kbert.preprocessing.preprocessing_layer import PreprocessingLayer, to_string_tensor
from kbert.preprocessing.base_tokenizer import BaseTokenizer

TRUNCATIONS = ("longest_first", "waterfall")


def split_segments(inputs):
    """Returns `(segments, was_tuple)` for a text input or a tuple of them."""
    if isinstance(inputs, dict):
        raise TypeError(
            "TextPacker takes texts or a (texts_a, texts_b) tuple, not a dict "
            f"(got keys {sorted(inputs)})."
        )
    if isinstance(inputs, list) and inputs and isinstance(inputs[0], (list, tuple)):
        # Python lists in a list: `[[a, b], ...]` rows or `[texts_a, texts_b]`, a guess that can transpose
        # pairs. (A list of two tensors is a pair: Keras hands a layer's tuple input over as a list.)
        raise ValueError(
            "Give text pairs as a tuple of two lists, (texts_a, texts_b); a list of lists is ambiguous (rows "
            "[a, b] would be read as columns). For rows: texts_a, texts_b = map(list, zip(*rows))."
        )
    if isinstance(inputs, (tuple, list)) and len(inputs) in (1, 2) and not isinstance(inputs[0], (str, bytes)):
        return list(inputs), True
    return [inputs], False


@keras.saving.register_keras_serializable(package="kbert")
class TextPacker(PreprocessingLayer):
    """Packs texts or text pairs into BERT's fixed-length model inputs.

    Each text is tokenized, the segments are truncated so the whole sequence
    fits, and packed as `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, then padded
    to `sequence_length`. The result is a dict of int32 tensors:

    - `token_ids`: token ids, `[PAD]` after the text;
    - `segment_ids`: 0 for `[CLS]`, the first text and its `[SEP]`, 1 for the
      second text and its `[SEP]`, 0 for padding;
    - `padding_mask`: 1 on real tokens, 0 on padding.

    Truncation uses only core TensorFlow ops (TF Serving has them all):
    `"longest_first"` (TF-Text's `ShrinkLongestTrimmer`) removes tokens from
    the end of the longer text, one at a time, as BERT's reference code does
    (on a tie it cuts the first text, where the reference cuts the second);
    `"waterfall"` cuts the second text first.

    The same layer runs eagerly, inside `tf.data.Dataset.map` and inside an
    exported graph, with the same result.

    Args:
        tokenizer: a `kbert.Tokenizer` (WordPiece) or `kbert.SentencePieceTokenizer`.
        sequence_length: the packed length, `[CLS]` and `[SEP]`s included.
        truncation: `"longest_first"` or `"waterfall"`.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
    >>> preprocessor = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=8)
    >>> x = preprocessor((["a b"], ["c"]))
    >>> x["token_ids"].numpy().tolist()
    [[2, 5, 6, 3, 7, 3, 0, 0]]
    >>> x["segment_ids"].numpy().tolist()
    [[0, 0, 0, 0, 1, 1, 0, 0]]
    """

    def __init__(self, tokenizer, sequence_length=128, truncation="longest_first", **kwargs):
        super().__init__(**kwargs)
        if isinstance(tokenizer, dict):
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        if not isinstance(tokenizer, BaseTokenizer):
            raise TypeError(
                "`tokenizer` must be a kbert.Tokenizer or kbert.SentencePieceTokenizer, got "
                f"{type(tokenizer).__name__}."
            )
        if truncation not in TRUNCATIONS:
            raise ValueError(f"`truncation` must be one of {TRUNCATIONS}, got {truncation!r}.")
        if int(sequence_length) < 3:
            raise ValueError(
                f"`sequence_length` must be at least 3 ([CLS], a token, [SEP]), got {sequence_length}."
            )
        self.tokenizer = tokenizer
        self.sequence_length = int(sequence_length)
        self.truncation = truncation

    def call(self, inputs):
        segments, _ = split_segments(inputs)
        segments = [to_string_tensor(s, name="texts") for s in segments]
        scalar = segments[0].shape.rank == 0
        if len(segments) > 1:
            # A control dependency, so in a graph the check runs before the
            # trimmer, which would fail first with a shape message of its own.
            checks = [
                tf.debugging.assert_equal(
                    tf.size(s), tf.size(segments[0]), message="The texts of a pair must be as many."
                )
                for s in segments[1:]
            ]
            with tf.control_dependencies(checks):
                segments = [tf.identity(s) for s in segments]
        # [CLS] plus one [SEP] per segment.
        budget = self.sequence_length - 1 - len(segments)
        if budget < len(segments):
            raise ValueError(
                f"`sequence_length` {self.sequence_length} leaves no room for {len(segments)} "
                "texts besides [CLS] and [SEP]."
            )
        # Only the first `budget` tokens of a text can be kept: cutting it to
        # what they span first bounds the work by `sequence_length`, not by
        # the length of the text sent (a served model's request).
        token_ids = [self.tokenizer(self.tokenizer.cut_texts(s, budget)) for s in segments]
        # No text keeps more than the budget, so capping each first changes no
        # result; it bounds ShrinkLongestTrimmer, which cuts a token per step.
        # For one text the cap is the whole cut.
        token_ids = [ids[:, :budget] for ids in token_ids]
        if len(token_ids) > 1:
            if self.truncation == "longest_first":
                trimmer = tf_text.ShrinkLongestTrimmer(budget)
            else:
                trimmer = tf_text.WaterfallTrimmer(budget)
            token_ids = trimmer.trim(token_ids)
        packed, segment_ids = tf_text.combine_segments(
            token_ids,
            start_of_sequence_id=self.tokenizer.cls_token_id,
            end_of_segment_id=self.tokenizer.sep_token_id,
        )
        token_ids, padding_mask = tf_text.pad_model_inputs(
            packed, self.sequence_length, pad_value=self.tokenizer.pad_token_id
        )
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, self.sequence_length, pad_value=0)
        outputs = {
            "token_ids": tf.cast(token_ids, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
        }
        if scalar:
            outputs = {name: value[0] for name, value in outputs.items()}
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "sequence_length": self.sequence_length,
                "truncation": self.truncation,
            }
        )
        return config


# Files of kbert 0.4 name the class by its old name.
keras.saving.get_custom_objects()["kbert>Preprocessor"] = TextPacker
