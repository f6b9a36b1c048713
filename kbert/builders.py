"""Entry points that build ready-to-fit task models from a preset, a checkpoint or an encoder.

`TASK_BUILDERS` is the registry of task models: a task is one model file
(`kbert/models/`), one task preprocessor file (`kbert/preprocessing/`), and
an entry point here.
"""

import warnings

from kbert.checkpoints.encoder_argument import resolve_encoder
from kbert.models.classifier import Classifier
from kbert.models.embedder import Embedder
from kbert.models.encoder import Encoder
from kbert.models.multiple_choice import MultipleChoice
from kbert.models.presets import PRESETS
from kbert.models.question_answerer import QuestionAnswerer
from kbert.models.tagger import Tagger
from kbert.preprocessing.text_packer import TextPacker


# The arguments with which every builder resolves its encoder and preprocessor,
# documented once: each builder's docstring holds the line `{encoder arguments}`.
_ENCODER_ARGUMENTS_DOC = """encoder: a preset name (`"tiny"` ... `"large"`, see `kbert.PRESETS`),
            freshly initialised, a pretrained checkpoint (folder or name, e.g.
            `"bert-base-uncased"`, see `kbert.load_pretrained`), a
            `kbert.Encoder`, a keras-hub `BertBackbone` or `AlbertBackbone`,
            or a `.keras` file or `kbert pretrain` run folder (every form:
            `kbert.checkpoints.resolve_encoder`).
        vocabulary: the tokens (list or `vocab.txt` path) the encoder embeds,
            a SentencePiece model (`spiece.model` path) or a ready tokenizer.
        preprocessor: a ready `kbert.TextPacker`, instead of `vocabulary`.
        **encoder_options: `lowercase` (whether the vocabulary is uncased;
            default True), `dtype` (the preset encoder's dtype policy, e.g.
            `"mixed_bfloat16"`), LoRA fine-tuning (`lora_rank=8`, and
            optionally `lora_targets` and `lora_alpha`: see
            `kbert.Encoder.enable_lora`; a `kbert.Encoder` given is copied,
            not changed), and overrides of the preset, e.g.
            `num_layers=3`."""


def _with_encoder_arguments(builder):
    builder.__doc__ = builder.__doc__.replace("{encoder arguments}", _ENCODER_ARGUMENTS_DOC)
    return builder


def build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length, encoder_options, dropout=None):
    """Resolves `encoder` (any form `kbert.checkpoints.resolve_encoder` takes) and its preprocessor.

    A preset name is a fresh encoder of `vocabulary`'s tokens; a checkpoint
    (a folder or a name `kbert.load_pretrained` knows: Hugging Face and
    keras-hub names too) brings its own vocabulary and casing; a keras-hub
    (or keras-nlp) `BertBackbone` or `AlbertBackbone` becomes a
    `kbert.Encoder` with its weights. `encoder_options` holds `lowercase`,
    `dtype` and the preset's overrides. `dropout`, the task head's rate, is
    also the rate inside an encoder named by a string (preset, checkpoint,
    `.keras` file), unless `encoder_options` sets its own (BERT uses one
    rate throughout).
    """
    encoder_kwargs = dict(encoder_options)
    lora = {name: encoder_kwargs.pop(f"lora_{name}") for name in ("rank", "targets", "alpha")
            if f"lora_{name}" in encoder_kwargs}
    lowercase = encoder_kwargs.pop("lowercase", True)
    dtype = encoder_kwargs.pop("dtype", None)
    if dropout is not None and isinstance(encoder, str):
        encoder_kwargs.setdefault("dropout", dropout)
    if preprocessor is not None:
        if vocabulary is not None:
            raise ValueError("Give either a `vocabulary` or a `preprocessor`, not both.")
        vocabulary, sequence_length = preprocessor.tokenizer, preprocessor.sequence_length
    given = encoder
    encoder, tokenizer = resolve_encoder(encoder, vocabulary, lowercase, require_tokenizer=True,
                                         sequence_length=sequence_length, dtype=dtype, **encoder_kwargs)
    if preprocessor is None:
        preprocessor = TextPacker(tokenizer, sequence_length=sequence_length)
    if isinstance(encoder, Encoder) and encoder.base_name is None and isinstance(given, str):
        encoder.base_name = given  # what `save_adapter` names as the adapters' base
    if lora.get("rank") is not None:
        if isinstance(given, str) and given in PRESETS:
            warnings.warn(f"LoRA adapts a pretrained encoder, but the preset {given!r} is freshly initialised: its "
                          "frozen weights are random. Fine-tune it in full, or start from a checkpoint (e.g. "
                          "all-minilm-l6-v2).", stacklevel=3)
        if encoder is given:  # the caller's encoder stays as it is (it may be the base of other adapters)
            encoder = encoder.copy()
        encoder.enable_lora(lora["rank"], lora.get("targets"), lora.get("alpha"))
    elif lora:
        raise ValueError(f"{sorted('lora_' + name for name in lora)} set LoRA's adapters: give `lora_rank` too.")
    return encoder, preprocessor


@_with_encoder_arguments
def classifier(encoder="base", num_classes=2, vocabulary=None, sequence_length=128, preprocessor=None, dropout=0.1,
               class_names=None, problem_type="single_label", **encoder_options):
    """A text or text-pair classifier (or multi-label classifier, or regressor) that fits on raw strings.

    Args:
        {encoder arguments}
        num_classes: number of classes.
        sequence_length: tokens per example after packing; longer texts are
            truncated.
        dropout: dropout before the output layer, and in a preset encoder.
        class_names: optional names of the classes, in id order.
        problem_type: `"single_label"` (one class of `num_classes`),
            `"multi_label"` (any of `num_classes` labels, a sigmoid each) or
            `"regression"` (a score: `num_classes=1`).

    Returns:
        A compiled `kbert.Classifier`: `fit(texts, labels)` or
        `fit((texts_a, texts_b), labels)` works as is.

    Example:
    >>> vocab = kbert.learn_vocabulary(["free prize now", "see you soon"] * 5, vocabulary_size=60, verbose=False)
    >>> clf = kbert.classifier("tiny", num_classes=2, vocabulary=vocab, sequence_length=16)
    >>> clf.predict(["free prize"], verbose=0).shape
    (1, 2)
    """
    encoder, preprocessor = build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length,
                                                           encoder_options, dropout)
    return Classifier(encoder, num_classes=num_classes, preprocessor=preprocessor, dropout=dropout,
                      class_names=class_names, problem_type=problem_type)


@_with_encoder_arguments
def question_answerer(encoder="base", vocabulary=None, sequence_length=384, doc_stride=128, max_question_length=64,
                      preprocessor=None, max_answer_length=15, n_best=20, null_score_threshold=None,
                      **encoder_options):
    """An extractive question answerer (SQuAD) that fits on raw questions and contexts.

    Args:
        {encoder arguments}
        sequence_length: tokens per window, `[CLS] question [SEP] context [SEP]`.
        doc_stride: tokens between the starts of a long context's windows.
        max_question_length: question tokens kept; the rest are cut.
        max_answer_length: the longest answer, in tokens.
        n_best: candidate answers kept per question.
        null_score_threshold: None to always answer (SQuAD v1.1), or the
            margin by which "no answer" must beat the best span (v2.0).

    Returns:
        A compiled `kbert.QuestionAnswerer`: `fit(kbert.data.load_squad())`
        works as is, and `answer(question=..., context=...)` answers.

    Example:
    >>> vocab = kbert.learn_vocabulary(["where is the cat ? the cat is on the mat ."] * 5,
    ...                                vocabulary_size=40, verbose=False)
    >>> qa = kbert.question_answerer("tiny", vocabulary=vocab, sequence_length=128)
    >>> sorted(qa.answer(question="where is the cat?", context="the cat is on the mat."))
    ['end', 'score', 'start', 'text']
    """
    encoder, preprocessor = build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length,
                                                           encoder_options)
    return QuestionAnswerer(encoder, preprocessor=preprocessor, doc_stride=doc_stride,
                            max_question_length=max_question_length, max_answer_length=max_answer_length,
                            n_best=n_best, null_score_threshold=null_score_threshold)


@_with_encoder_arguments
def tagger(encoder="base", labels=None, vocabulary=None, sequence_length=128, preprocessor=None, dropout=0.1,
           **encoder_options):
    """A word tagger (named entities, parts of speech) that fits on lists of words.

    Names are easier to find with a cased vocabulary (`lowercase=False`).

    Args:
        {encoder arguments}
        labels: the tag strings, in id order, e.g.
            `kbert.data.CONLL2003_LABELS`.
        sequence_length: tokens per window; a longer sentence is split into
            several windows between words, and no word is lost.
        dropout: dropout before the output layer, and in a preset encoder.

    Returns:
        A compiled `kbert.Tagger`: `fit(sentences, tags)` works as is, and
        `tag(sentences)` gives one tag per word.

    Example:
    >>> sentences, tags = kbert.data.load_conll2003("dev")
    >>> vocab = kbert.learn_vocabulary([" ".join(s) for s in sentences[:200]], vocabulary_size=500,
    ...                                lowercase=False, verbose=False)
    >>> ner = kbert.tagger("tiny", labels=kbert.data.CONLL2003_LABELS, vocabulary=vocab,
    ...                    lowercase=False, sequence_length=32)
    >>> history = ner.fit(sentences[:32], tags[:32], epochs=1, verbose=0)
    >>> len(ner.tag([["Peter", "Blackburn", "visited", "Germany"]])[0])
    4
    """
    if labels is None:
        raise ValueError("Give the tag `labels`, e.g. kbert.data.CONLL2003_LABELS.")
    encoder, preprocessor = build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length,
                                                           encoder_options, dropout)
    return Tagger(encoder, labels=labels, preprocessor=preprocessor, dropout=dropout)


@_with_encoder_arguments
def multiple_choice(encoder="base", num_choices=4, vocabulary=None, sequence_length=128, preprocessor=None,
                    dropout=0.1, **encoder_options):
    """A multiple-choice model (SWAG-style) that fits on raw contexts and choices.

    Args:
        {encoder arguments}
        num_choices: choices per question, the same for all.
        sequence_length: tokens per packed `[CLS] context [SEP] choice [SEP]`;
            the longer text is cut first.
        dropout: dropout before the scoring layer, and in a preset encoder.

    Returns:
        A compiled `kbert.MultipleChoice`: `fit((contexts, choices), labels)`
        works as is, with `num_choices` texts per context in `choices`.

    Example:
    >>> vocab = kbert.learn_vocabulary(["she opened the door", "he sat down"] * 5, vocabulary_size=60, verbose=False)
    >>> mc = kbert.multiple_choice("tiny", num_choices=2, vocabulary=vocab, sequence_length=16)
    >>> mc.choose((["she opened"], [["the door", "he sat down"]])).shape
    (1,)
    """
    encoder, preprocessor = build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length,
                                                           encoder_options, dropout)
    return MultipleChoice(encoder, num_choices=num_choices, preprocessor=preprocessor, dropout=dropout)


@_with_encoder_arguments
def embedder(encoder="base", vocabulary=None, pooling="mean", normalize=False, sequence_length=128,
             preprocessor=None, feature_layers=(-1,), **encoder_options):
    """Sentence embeddings and token features from an encoder, on raw text; no training.

    Args:
        {encoder arguments}
        pooling: `"mean"` (average of the token vectors, padding excluded),
            `"cls"` (the `[CLS]` vector) or `"pooled"` (the tanh pooler's).
        normalize: scale sentence embeddings to unit L2 norm.
        sequence_length: tokens per packed text; longer texts are truncated.
        feature_layers: the Transformer blocks whose outputs are concatenated
            into `token_features`, e.g. `(-4, -3, -2, -1)`.

    Returns:
        A `kbert.Embedder`: `embed(texts)` gives one vector per text, and
        `predict(texts)` the dict `sentence_embedding`, `token_features`,
        `padding_mask`.

    Example:
    >>> vocab = kbert.learn_vocabulary(["the cat sat on the mat", "a dog ran"] * 5, vocabulary_size=60, verbose=False)
    >>> embedder = kbert.embedder("tiny", vocabulary=vocab, sequence_length=16)
    >>> embedder.embed(["the cat sat"]).shape
    (1, 128)
    """
    encoder, preprocessor = build_encoder_and_preprocessor(encoder, vocabulary, preprocessor, sequence_length,
                                                           encoder_options)
    return Embedder(encoder, preprocessor=preprocessor, pooling=pooling, normalize=normalize,
                    feature_layers=feature_layers)


# The registry of task models: entry point names as `kbert train` recipes and users know them.
TASK_BUILDERS = {
    "classifier": classifier,
    "question_answerer": question_answerer,
    "tagger": tagger,
    "multiple_choice": multiple_choice,
    "embedder": embedder,
}
