"""BERT's masked-LM corruption of a token sequence, with TF-Text's masking ops."""

import math

import tensorflow as tf
import tensorflow_text as tf_text


def default_max_predictions(sequence_length, mask_rate):
    """Enough positions for `mask_rate` of a full sequence (20 for 128 at 15 %)."""
    return max(1, math.ceil(sequence_length * mask_rate))


class MaskedLMMasker:
    """Chooses tokens to predict and corrupts them, as BERT pretrains.

    Of the tokens of a packed sequence that are not `[CLS]`, `[SEP]` or
    `[PAD]`, `mask_rate` (rounded up, at most `max_predictions`) are chosen.
    Each chosen token becomes `[MASK]` with probability `mask_token_rate`, a
    random non-special token with probability `random_token_rate`, and stays
    as it is otherwise (the paper's 80/10/10; Table 8 of the paper varies
    these two rates). With `whole_word=True` whole words are chosen: all
    WordPiece pieces of a word are predicted together (`mask_rate` then
    counts words).

    Selection and replacement are TF-Text's `mask_language_model` with its
    `RandomItemSelector`; their randomness is stateless and comes from the
    `seed` given with each batch, so one seed gives one masking, and a
    new seed (kbert's pretraining data takes it from the epoch and example
    number) gives a new one: dynamic masking that is still reproducible.

    Args:
        vocabulary_size: number of token ids.
        mask_token_id, special_token_ids: id of `[MASK]`, and the ids that
            are never chosen nor drawn as random tokens.
        mask_rate: share of the tokens (or words) to predict.
        mask_token_rate, random_token_rate: shares of the chosen tokens that
            become `[MASK]` and a random token.
        max_predictions: the most tokens chosen in one sequence, and the
            length of the returned position arrays.
        whole_word: choose whole words.
        continuation_ids: ids of the `##` pieces (needed for `whole_word`).

    Example:
    >>> masker = MaskedLMMasker(vocabulary_size=10, mask_token_id=4,
    ...                         special_token_ids=[0, 1, 2, 3, 4], max_predictions=2)
    >>> out = masker(tf.constant([[2, 5, 6, 7, 8, 3]]), seed=tf.constant([1, 2], tf.int64))
    >>> int(tf.reduce_sum(out["mask_weights"]))
    1
    """

    def __init__(
        self,
        vocabulary_size,
        mask_token_id,
        special_token_ids,
        mask_rate=0.15,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        max_predictions=20,
        whole_word=False,
        continuation_ids=None,
    ):
        if not 0.0 < mask_rate <= 1.0:
            raise ValueError(f"`mask_rate` must be in (0, 1], got {mask_rate}.")
        if mask_token_rate < 0 or random_token_rate < 0 or mask_token_rate + random_token_rate > 1:
            raise ValueError(
                "`mask_token_rate` and `random_token_rate` must be >= 0 and sum to at most 1, "
                f"got {mask_token_rate} and {random_token_rate}."
            )
        if int(max_predictions) < 1:
            raise ValueError(f"`max_predictions` must be at least 1, got {max_predictions}.")
        if whole_word and continuation_ids is None:
            raise ValueError("`whole_word=True` needs `continuation_ids`, the ids of `##` pieces.")
        self.vocabulary_size = int(vocabulary_size)
        self.mask_token_id = int(mask_token_id)
        self.special_token_ids = sorted(int(i) for i in special_token_ids)
        self.mask_rate = float(mask_rate)
        self.mask_token_rate = float(mask_token_rate)
        self.random_token_rate = float(random_token_rate)
        self.max_predictions = int(max_predictions)
        self.whole_word = bool(whole_word)
        is_continuation = [False] * self.vocabulary_size
        for token_id in continuation_ids or []:
            is_continuation[int(token_id)] = True
        self._is_continuation = tf.constant(is_continuation)
        # Random replacements come from the ordinary tokens only.
        ordinary = sorted(set(range(self.vocabulary_size)) - set(self.special_token_ids))
        if not ordinary:
            raise ValueError("The vocabulary has no tokens besides the special ones.")
        self._ordinary_ids = tf.constant(ordinary, tf.int32)

    def __call__(self, token_ids, seed):
        """Masks a batch of packed sequences.

        Args:
            token_ids: int32 ids, `[batch, sequence_length]` (padding with
                `[PAD]` is fine: it is never chosen).
            seed: int64 tensor of shape `[2]`, the stateless random seed of
                the batch.

        Returns:
            A dict: `token_ids` (the corrupted sequences), and, each
            `[batch, max_predictions]` and 0-padded, `mask_positions`,
            `mask_ids` (the original tokens there) and `mask_weights` (1.0 on
            real entries).
        """
        token_ids = tf.convert_to_tensor(token_ids, tf.int32)
        if not self.whole_word:
            return self._mask(token_ids, seed)
        # TF-Text shuffles words with the same function for every row, and
        # only row-local numbers reach it, so rows get seeds one at a time
        # (folded in, not added: seed + row would repeat the next batch's).
        rows = tf.range(tf.shape(token_ids, tf.int64)[0])
        spec = {
            "token_ids": tf.TensorSpec([None], tf.int32),
            "mask_positions": tf.TensorSpec([self.max_predictions], tf.int32),
            "mask_ids": tf.TensorSpec([self.max_predictions], tf.int32),
            "mask_weights": tf.TensorSpec([self.max_predictions], tf.float32),
        }

        def one_row(row):
            row_seed = tf.random.experimental.stateless_fold_in(seed, row)
            masked = self._mask(token_ids[row][tf.newaxis], row_seed)
            return {name: value[0] for name, value in masked.items()}

        return tf.map_fn(one_row, rows, fn_output_signature=spec)

    def _mask(self, token_ids, seed):
        selection_seed, values_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))

        def shuffle(positions):
            # Token positions are numbered across the batch, so the first one
            # names the row: each row gets its own permutation.
            row_seed = selection_seed + tf.stack(
                [tf.constant(0, tf.int64), tf.cast(tf.reduce_sum(positions[:1]), tf.int64)]
            )
            return tf.random.experimental.stateless_shuffle(positions, seed=row_seed)

        selector = tf_text.RandomItemSelector(
            max_selections_per_batch=self.max_predictions,
            selection_rate=self.mask_rate,
            unselectable_ids=self.special_token_ids,
            shuffle_fn=shuffle,
        )
        masked, positions, originals = tf_text.mask_language_model(
            self._items(token_ids),
            item_selector=selector,
            mask_values_chooser=_StatelessMaskValuesChooser(self, values_seed),
            axis=1,
        )
        # mask_language_model returns tokens, words already merged.
        masked = masked.to_tensor(shape=tf.shape(token_ids))
        positions = tf.cast(positions, tf.int32)
        if self.whole_word:
            # Whole words can overshoot the budget; the tokens past it are not
            # predicted, so they get their original ids back.
            extra = positions[:, self.max_predictions :]
            rows = tf.cast(extra.value_rowids(), tf.int32)
            masked = tf.tensor_scatter_nd_update(
                masked,
                tf.stack([rows, extra.flat_values], axis=1),
                originals[:, self.max_predictions :].flat_values,
            )
        shape = [None, self.max_predictions]
        positions = positions[:, : self.max_predictions]
        return {
            "token_ids": masked,
            "mask_positions": positions.to_tensor(shape=shape),
            "mask_ids": originals[:, : self.max_predictions].to_tensor(shape=shape),
            "mask_weights": tf.ones_like(positions, tf.float32).to_tensor(shape=shape),
        }

    def _items(self, token_ids):
        """The batch as ragged items: tokens, or words of pieces."""
        sequences = tf.RaggedTensor.from_tensor(token_ids)
        if not self.whole_word:
            return sequences
        starts_word = tf.logical_not(tf.gather(self._is_continuation, sequences.flat_values))
        # Each row starts a word, whatever its first token.
        row_starts = sequences.row_starts()
        starts_word = tf.tensor_scatter_nd_update(
            starts_word, row_starts[:, tf.newaxis], tf.ones_like(row_starts, tf.bool)
        )
        word_starts = tf.where(starts_word)[:, 0]
        words = tf.RaggedTensor.from_row_starts(sequences.flat_values, word_starts)
        words_per_row = tf.math.segment_sum(
            tf.ones_like(word_starts), tf.gather(sequences.value_rowids(), word_starts)
        )
        return tf.RaggedTensor.from_row_lengths(words, words_per_row)


class _StatelessMaskValuesChooser(tf_text.MaskValuesChooser):
    """TF-Text's values chooser interface, with seeded stateless draws."""

    def __init__(self, masker, seed):
        super().__init__(
            masker.vocabulary_size,
            masker.mask_token_id,
            mask_token_rate=masker.mask_token_rate,
            random_token_rate=masker.random_token_rate,
        )
        self._ordinary_ids = masker._ordinary_ids
        self._seed = seed

    def get_mask_values(self, masked_lm_ids):
        chosen = masked_lm_ids.flat_values
        draw_seed, token_seed = tf.unstack(tf.random.experimental.stateless_split(self._seed, 2))
        draw = tf.random.stateless_uniform(tf.shape(chosen), seed=draw_seed)
        random_index = tf.random.stateless_uniform(
            tf.shape(chosen), seed=token_seed, maxval=tf.shape(self._ordinary_ids)[0], dtype=tf.int32
        )
        random_ids = tf.cast(tf.gather(self._ordinary_ids, random_index), chosen.dtype)
        values = tf.where(
            draw < self._mask_token_rate,
            tf.cast(self.mask_token, chosen.dtype),
            tf.where(draw < self._mask_token_rate + self._random_token_rate, random_ids, chosen),
        )
        return masked_lm_ids.with_flat_values(values)
