"""BERT's masked-LM corruption of a token sequence (and ALBERT's n-gram masking), with TF-Text's masking ops."""

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

    With `max_ngram=n > 1` (ALBERT's n-gram masking) spans of 1 to n whole
    words are chosen: each sequence is cut into spans of consecutive words
    whose lengths k are drawn with probability proportional to 1/k (for
    n = 3: 6/11, 3/11, 2/11), and a span ends at every special token, so it
    never holds part of a word nor crosses `[CLS]`, `[SEP]` or padding (a
    span next to one may be shorter than drawn). Spans are then taken in a
    random order, each one that still fits, until `mask_rate` of the
    sequence's non-special tokens (rounded up, at most `max_predictions`) are
    chosen: here `mask_rate` counts tokens, as in ALBERT, and a span that
    would overshoot is skipped, so a sequence may get a token or two fewer.
    `ngram_spans` shows the spans.

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
        continuation_ids: ids of the pieces that continue a word (`##`
            pieces; `Tokenizer.continuation_ids()`), needed for `whole_word`
            and `max_ngram`.
        max_ngram: the longest span of words chosen together; 1 (the
            default) chooses tokens (or words) one by one.

    Example:
    >>> masker = MaskedLMMasker(vocabulary_size=10, mask_token_id=4,
    ...                         special_token_ids=[0, 1, 2, 3, 4], max_predictions=2)
    >>> out = masker(tf.constant([[2, 5, 6, 7, 8, 3]]), seed=tf.constant([1, 2], tf.int64))
    >>> int(tf.reduce_sum(out["mask_weights"]))
    1
    >>> spans = MaskedLMMasker(vocabulary_size=10, mask_token_id=4, special_token_ids=[0, 1, 2, 3, 4],
    ...                        continuation_ids=[9], max_ngram=3)
    >>> tokens = tf.constant([[2, 5, 6, 9, 7, 3, 8, 3]])  # 9 continues the word 6
    >>> positions = spans.ngram_spans(tokens, seed=tf.constant([1, 2], tf.int64))[0].to_list()
    >>> all(len(span) == 1 for span in positions if int(tokens[0, span[0]]) in (2, 3))
    True
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
        max_ngram=1,
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
        if isinstance(max_ngram, bool) or int(max_ngram) != max_ngram or max_ngram < 1:
            raise ValueError(f"`max_ngram` must be a positive integer, got {max_ngram!r}.")
        if max_ngram > 1 and continuation_ids is None:
            raise ValueError(
                f"`max_ngram={max_ngram}` masks spans of whole words and needs `continuation_ids`, "
                "the ids of the pieces that continue a word."
            )
        self.vocabulary_size = int(vocabulary_size)
        self.mask_token_id = int(mask_token_id)
        self.special_token_ids = sorted(int(i) for i in special_token_ids)
        self.mask_rate = float(mask_rate)
        self.mask_token_rate = float(mask_token_rate)
        self.random_token_rate = float(random_token_rate)
        self.max_predictions = int(max_predictions)
        self.whole_word = bool(whole_word)
        self.max_ngram = int(max_ngram)
        is_continuation = [False] * self.vocabulary_size
        for token_id in continuation_ids or []:
            is_continuation[int(token_id)] = True
        self._is_continuation = tf.constant(is_continuation)
        is_special = [False] * self.vocabulary_size
        for token_id in self.special_token_ids:
            is_special[token_id] = True
        self._is_special = tf.constant(is_special)
        # Span lengths 1..max_ngram with probabilities proportional to 1/n, as
        # ALBERT draws them: the cumulative bounds a uniform draw is placed in.
        weights = [1.0 / n for n in range(1, self.max_ngram + 1)]
        self._ngram_bounds = tf.constant(
            [sum(weights[: n + 1]) / sum(weights) for n in range(self.max_ngram - 1)], tf.float32
        )
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
        if self.max_ngram > 1 or not self.whole_word:
            # (The span selector numbers its draws across the batch itself.)
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

    def ngram_spans(self, token_ids, seed):
        """The spans that n-gram masking chooses from, as token positions.

        Args:
            token_ids, seed: as for calling the masker; the same seed gives
                the spans that call chooses from.

        Returns:
            A `tf.RaggedTensor` `[batch, (spans), (positions)]`: every
            position of each row, grouped into spans. A special token is a
            span of its own (never chosen).
        """
        token_ids = tf.convert_to_tensor(token_ids, tf.int32)
        selection_seed, _ = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        span_seed, _ = tf.unstack(tf.random.experimental.stateless_split(selection_seed, 2))
        sequences = tf.RaggedTensor.from_tensor(token_ids)
        # Each token's position in its row (tokens are numbered across the batch).
        positions = tf.range(tf.size(sequences.flat_values, tf.int64)) - tf.gather(
            sequences.row_starts(), sequences.value_rowids()
        )
        return self._spans(sequences, span_seed).with_flat_values(tf.cast(positions, tf.int32))

    def _spans(self, sequences, seed):
        """The sequences `[batch, (tokens)]` as spans of whole words, `[batch, (spans), (tokens)]`."""
        flat = sequences.flat_values
        rows = sequences.nrows()
        token_rows = sequences.value_rowids()
        is_special = tf.gather(self._is_special, flat)
        # A token starts a word unless it continues one; a row's first token,
        # and every token next to a special one, starts one regardless.
        after_special = tf.concat([[False], is_special[:-1]], 0)
        starts_word = tf.logical_not(tf.gather(self._is_continuation, flat)) | after_special
        row_starts = sequences.row_starts()
        starts_word = tf.tensor_scatter_nd_update(
            starts_word, row_starts[:, tf.newaxis], tf.ones_like(row_starts, tf.bool)
        )
        word_starts = tf.where(starts_word)[:, 0]
        word_rows = tf.gather(token_rows, word_starts)
        words_per_row = tf.math.unsorted_segment_sum(tf.ones_like(word_rows), word_rows, rows)
        first_word = tf.cumsum(words_per_row, exclusive=True)

        # Span lengths in words, drawn for each word; the spans of a row are
        # laid end to end from its first word (a renewal process), so span k
        # starts where the lengths of spans 0..k-1 add up to.
        draws = tf.random.stateless_uniform(tf.shape(word_starts), seed=seed)
        lengths = 1 + tf.searchsorted(self._ngram_bounds, draws, side="right")
        lengths = tf.cast(lengths, tf.int64)
        offsets = tf.cumsum(lengths, exclusive=True)
        offsets -= tf.gather(offsets, tf.gather(first_word, word_rows))
        inside = offsets < tf.gather(words_per_row, word_rows)
        drawn_starts = tf.boolean_mask(tf.gather(first_word, word_rows) + offsets, inside)
        starts_span = tf.scatter_nd(
            drawn_starts[:, tf.newaxis], tf.ones_like(drawn_starts, tf.bool), tf.shape(word_starts, tf.int64)
        )
        # Special tokens are spans of their own: a span ends before and after one.
        word_is_special = tf.gather(is_special, word_starts)
        after_special_word = tf.concat([[False], word_is_special[:-1]], 0)
        starts_span = starts_span | word_is_special | after_special_word
        span_starts = tf.boolean_mask(word_starts, starts_span)
        spans = tf.RaggedTensor.from_row_starts(flat, span_starts)
        spans_per_row = tf.math.unsorted_segment_sum(
            tf.ones_like(span_starts), tf.gather(token_rows, span_starts), rows
        )
        return tf.RaggedTensor.from_row_lengths(spans, spans_per_row)

    def _mask(self, token_ids, seed):
        selection_seed, values_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        if self.max_ngram > 1:
            span_seed, order_seed = tf.unstack(tf.random.experimental.stateless_split(selection_seed, 2))
            return self._select_and_replace(
                self._spans(tf.RaggedTensor.from_tensor(token_ids), span_seed),
                _SpanSelector(self, order_seed),
                token_ids,
                values_seed,
            )

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
        return self._select_and_replace(self._items(token_ids), selector, token_ids, values_seed)

    def _select_and_replace(self, items, selector, token_ids, values_seed):
        masked, positions, originals = tf_text.mask_language_model(
            items,
            item_selector=selector,
            mask_values_chooser=_StatelessMaskValuesChooser(self, values_seed),
            axis=1,
        )
        # mask_language_model returns tokens, words already merged.
        masked = masked.to_tensor(shape=tf.shape(token_ids))
        positions = tf.cast(positions, tf.int32)
        if self.whole_word and self.max_ngram == 1:
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


class _SpanSelector(tf_text.RandomItemSelector):
    """TF-Text's random item selector over spans, with its budget counted in tokens.

    Spans are visited in a seeded random order and each one that still fits
    the row's budget (`mask_rate` of its selectable tokens, rounded up, at
    most `max_predictions`) is taken, as ALBERT's reference data script does.
    """

    def __init__(self, masker, seed):
        super().__init__(
            max_selections_per_batch=masker.max_predictions,
            selection_rate=masker.mask_rate,
            unselectable_ids=masker.special_token_ids,
        )
        self._seed = seed

    def get_selection_mask(self, input_ids, axis=1):
        if axis != 1 or input_ids.ragged_rank != 2:
            raise ValueError("The span selector takes spans of tokens, [batch, (spans), (tokens)], on axis 1.")
        selectable = self.get_selectable(input_ids, axis)  # [batch, (spans)]
        span_lengths = tf.cast(input_ids.values.row_lengths(), tf.int32)
        lengths = selectable.with_flat_values(tf.where(selectable.flat_values, span_lengths, 0))
        # In float32, as TF-Text's own selector computes its share.
        budget = tf.math.ceil(tf.cast(tf.reduce_sum(lengths, axis=1), tf.float32) * self.selection_rate)
        budget = tf.minimum(tf.cast(budget, tf.int32), self.max_selections_per_batch)

        # A random order of each row's spans: selectable ones first.
        priority = tf.random.stateless_uniform(tf.shape(selectable.flat_values), seed=self._seed)
        priority = selectable.with_flat_values(tf.where(selectable.flat_values, priority, 2.0))
        order = tf.argsort(priority.to_tensor(default_value=3.0), axis=1, stable=True)
        visits = tf.reduce_max(tf.reduce_sum(tf.cast(selectable, tf.int32), axis=1))
        order = order[:, :visits]
        ordered_lengths = tf.gather(lengths.to_tensor(), order, batch_dims=1)
        ordered_selectable = tf.gather(selectable.to_tensor(), order, batch_dims=1)

        def visit(state, span):
            used, _ = state
            length, can_take = span
            take = can_take & (used + length <= budget)
            return used + tf.where(take, length, 0), take

        _, taken = tf.scan(
            visit,
            (tf.transpose(ordered_lengths), tf.transpose(ordered_selectable)),
            initializer=(tf.zeros_like(budget), tf.zeros_like(budget, tf.bool)),
        )
        taken = tf.transpose(taken)  # [batch, visits], in visiting order
        rows = tf.broadcast_to(tf.range(tf.shape(order)[0])[:, tf.newaxis], tf.shape(order))
        chosen = tf.scatter_nd(
            tf.stack([rows, order], axis=-1), taken, tf.shape(selectable.to_tensor())
        )
        return tf.RaggedTensor.from_tensor(chosen, lengths=selectable.row_lengths())


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
