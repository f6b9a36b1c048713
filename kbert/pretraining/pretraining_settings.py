"""The options of `pretraining_dataset`, as one object: masking, pairing, batching, reading."""

import dataclasses

from kbert.io.settings_objects import settings_from_arguments
from kbert.pretraining.documents import DOCUMENT_BOUNDARIES
from kbert.pretraining.sentence_pair_builder import SentencePairBuilder, resolve_objective

# The packed length of examples cut from text when none is asked for.
DEFAULT_SEQUENCE_LENGTH = 128


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
    """How `kbert.pretraining_dataset` makes its examples: every option but the corpus and vocabulary.

    The fields are the keyword arguments of `pretraining_dataset`, with the
    same defaults and meanings (see its docstring): a run's settings can be
    kept, compared and passed on as one value,
    `pretraining_dataset(corpus, vocabulary, settings)`.

    Values are checked when the settings are made, each bad one named in a
    one-line `ValueError`: the batching and reading options here, the
    pairing options (`sequence_length`, `objective`, the rates,
    `document_buffer`) by `SentencePairBuilder`'s own checks. The masking
    options are checked by `MaskedLMMasker` when the dataset is made, before
    any pass over the corpus.

    Example:
    >>> settings = PretrainingSettings(sequence_length=64, objective="sop", max_ngram=3)
    >>> settings.batch_size, settings.requested_objective
    (32, 'sop')
    >>> dataclasses.replace(settings, batch_size=8).batch_size
    8
    >>> PretrainingSettings(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: `batch_size` must be at least 1, got 0.
    """

    sequence_length: int | None = None  # None: 128, or a prepared folder's own
    batch_size: int = 32
    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int | None = None  # None: enough for `mask_rate` of a full sequence
    next_sentence: bool | None = None
    whole_word_masking: bool = False
    next_sentence_rate: float = 0.5
    short_sequence_rate: float = 0.1
    document_boundary: str = "file"
    document_buffer: int = 100
    shuffle_buffer: int = 10000
    seed: int | None = None  # None: drawn when the dataset is made
    lowercase: bool = True
    count_examples: bool = True
    verbose: bool = True
    objective: str | None = None  # None: `next_sentence`'s, or "nsp"
    sentence_order_rate: float = 0.5
    max_ngram: int = 1

    def __post_init__(self):
        if int(self.batch_size) < 1:
            raise ValueError(f"`batch_size` must be at least 1, got {self.batch_size}.")
        if int(self.shuffle_buffer) < 0:
            raise ValueError(f"`shuffle_buffer` must be at least 0 (0: no shuffle), got {self.shuffle_buffer}.")
        if self.document_boundary not in DOCUMENT_BOUNDARIES:
            raise ValueError(
                f"`document_boundary` must be one of {DOCUMENT_BOUNDARIES}, got {self.document_boundary!r}."
            )
        self._pair_builder(seed=0)  # for its checks; the seed may not be drawn yet

    @classmethod
    def from_arguments(cls, settings=None, **options):
        """`settings`, or the settings that the keyword `options` make; a keyword may repeat a setting, not change it."""
        return settings_from_arguments(cls, settings, options, "pretraining_dataset()", "kbert.PretrainingSettings")

    @property
    def requested_objective(self):
        """The pair objective that `objective` or `next_sentence` asks for; None where neither is set."""
        if self.objective is None and self.next_sentence is None:
            return None
        return resolve_objective(self.objective, self.next_sentence)

    def pair_builder(self):
        """The `SentencePairBuilder` that cuts documents into these settings' segment pairs (`seed` set)."""
        if self.seed is None:
            raise ValueError("The pair builder needs a seed: set `seed`.")
        return self._pair_builder(self.seed)

    def _pair_builder(self, seed):
        return SentencePairBuilder(
            DEFAULT_SEQUENCE_LENGTH if self.sequence_length is None else self.sequence_length,
            objective=self.objective,
            next_sentence=self.next_sentence,
            next_sentence_rate=self.next_sentence_rate,
            sentence_order_rate=self.sentence_order_rate,
            short_sequence_rate=self.short_sequence_rate,
            document_buffer=self.document_buffer,
            seed=seed,
        )
