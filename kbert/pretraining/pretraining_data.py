"""Pretraining batches together with what `Pretrainer.fit` needs to know of them."""

import tensorflow as tf

from kbert.pretraining.sentence_pair_builder import resolve_objective


class PretrainingData(tf.data.Dataset):
    """The batches of `kbert.pretraining_dataset`, with their objective, length and stream.

    It is the `tf.data.Dataset` of its batches (iterate it, `.take`,
    `.repeat()`, hand it to any `fit`), and it carries, as fields:

    - `objective`: the pair objective the batches were made for: `"nsp"`,
      `"sop"` or `"none"`; `Pretrainer.fit` refuses data whose objective is
      not the model's, naming both;
    - `num_examples`: the examples of one pass (`None` when not counted);
    - `stream`: `stream(start_batch=0, input_context=None)` gives endless
      passes from any batch of the whole sequence on, their pass numbers
      drawn in the graph, so a resumed `Pretrainer.fit` continues at the
      exact batch and masks of the run it resumes (of this data, or of the
      same `.repeat()`-ed); `None` where the data cannot jump (then `fit`
      reads up to the batch it resumes at);
    - `epoch_counter`: the `EpochCounter` that numbers the passes of plain
      iteration, so each epoch draws new masks; `None` if there is none.

    Transformations (`.map`, `.take`, ...) give plain datasets: the fields
    describe these batches only. `kbert_objective`, `kbert_num_examples`,
    `kbert_stream` and `kbert_epoch_counter` are the same fields by the
    names of the attributes earlier releases set on the dataset.

    Args:
        batches: a `tf.data.Dataset` of `(x, y, sample_weight)` batches.
        objective: `"nsp"`, `"sop"` or `"none"`.
        num_examples, stream, epoch_counter: see above.

    Example:
    >>> batches = tf.data.Dataset.from_tensors(
    ...     ({"token_ids": [[2, 7, 3]], "mask_positions": [[1]]}, {"mlm": [[5]]}, {"mlm": [[1.0]]}))
    >>> data = PretrainingData(batches, objective="none", num_examples=1)
    >>> data.objective, data.num_examples, int(data.cardinality())
    ('none', 1, 1)
    >>> x, y, sample_weight = next(iter(data))
    >>> y["mlm"].numpy().tolist()
    [[5]]
    """

    def __init__(self, batches, objective, num_examples=None, stream=None, epoch_counter=None):
        self.objective = resolve_objective(objective)
        self.num_examples = num_examples
        self.stream = stream
        self.epoch_counter = epoch_counter
        self._batches = batches
        # The batches' own pipeline runs under this dataset: it adds nothing to it.
        super().__init__(batches._variant_tensor)

    def _inputs(self):
        return [self._batches]

    @property
    def element_spec(self):
        return self._batches.element_spec

    kbert_objective = property(lambda self: self.objective)
    kbert_num_examples = property(lambda self: self.num_examples)
    kbert_stream = property(lambda self: self.stream)
    kbert_epoch_counter = property(lambda self: self.epoch_counter)
