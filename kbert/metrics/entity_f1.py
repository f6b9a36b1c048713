"""Entity-level precision, recall and F1 of tagged words, as conlleval and seqeval count them."""

_PREFIXES = ("B", "I", "E", "S")


def extract_entities(tags):
    """The entities of one sentence's tags, as `(type, start, end)` with `end` exclusive.

    Chunks are read as the CoNLL evaluation script `conlleval` reads them
    (and `seqeval` in its default mode), so IOB1, IOB2 and IOBES tags all
    work, and so do tag sequences a model predicts that break the scheme:

    - `B-X` (and `S-X`) always starts an entity;
    - `I-X` (or `E-X`) continues the entity before it if that entity has
      type X and has not ended; otherwise it starts a new one (so `I-X`
      after `O`, or after `I-Y`, starts an entity);
    - an entity ends before `O`, before `B-`/`S-`, before a tag of another
      type, after `E-`/`S-`, and at the end of the sentence.

    Args:
        tags: a list of tag strings: `"O"` or a prefix `B`, `I`, `E`, `S`,
            a dash and a type (`"B-PER"`).

    Example:
    >>> extract_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 2), ('LOC', 3, 4), ('LOC', 4, 5), ('ORG', 5, 6)]

    Raises:
        ValueError: a tag is not `O` or prefix-dash-type.
    """
    entities = []
    start = None  # Start of the open entity, if any.
    previous_prefix, previous_type = "O", None
    for position, tag in enumerate(list(tags) + ["O"]):
        prefix, entity_type = _parse(tag, position)
        if start is not None and _closes(previous_prefix, previous_type, prefix, entity_type):
            entities.append((previous_type, start, position))
            start = None
        if prefix != "O" and start is None:
            start = position
        previous_prefix, previous_type = prefix, entity_type
    return entities


def _parse(tag, position):
    if not isinstance(tag, str):
        raise ValueError(f"Tag {position} is a {type(tag).__name__}, not a string: {tag!r}.")
    if tag == "O":
        return "O", None
    prefix, dash, entity_type = tag.partition("-")
    if not dash or prefix not in _PREFIXES or not entity_type:
        raise ValueError(
            f"Tag {position} is {tag!r}; tags must be 'O' or B-, I-, E- or S- followed by a type."
        )
    return prefix, entity_type


def _closes(previous_prefix, previous_type, prefix, entity_type):
    """Whether the entity open at the previous tag ends before this tag."""
    return (
        previous_prefix in ("E", "S")
        or prefix in ("O", "B", "S")
        or entity_type != previous_type
    )


def entity_scores(true_tags, predicted_tags):
    """Entity-level precision, recall and F1, micro-averaged, and per entity type.

    An entity counts as correct only when a predicted entity has exactly the
    type, start and end of a true one (see `extract_entities` for how tags
    become entities). The overall scores are micro-averaged: counts of all
    types are summed before dividing, as conlleval and seqeval's default
    report (`seqeval.metrics.f1_score`, mode None) do. A score whose
    denominator is 0 is 0.

    Args:
        true_tags: the gold tags, a list of sentences, each a list of tags.
        predicted_tags: the predicted tags, the same shape.

    Returns:
        A dict with `precision`, `recall`, `f1`, `support` (true entities),
        `predicted` (predicted entities), `correct`, and `per_type`: a dict
        from each type seen in either input (sorted) to the same keys
        (but `per_type`) for that type.

    Example:
    >>> true = [["B-PER", "I-PER", "O", "B-LOC"]]
    >>> predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
    >>> scores = entity_scores(true, predicted)
    >>> scores["precision"], scores["recall"], scores["per_type"]["PER"]["f1"]
    (0.5, 0.5, 1.0)

    Raises:
        TypeError: the inputs are not lists of sentences.
        ValueError: sentence counts or lengths differ, or a tag is malformed.
    """
    true_tags = _sentences(true_tags, "true_tags")
    predicted_tags = _sentences(predicted_tags, "predicted_tags")
    if len(true_tags) != len(predicted_tags):
        raise ValueError(
            f"Got {len(true_tags)} sentences of true tags but {len(predicted_tags)} of "
            "predicted tags."
        )
    true_entities, predicted_entities = set(), set()
    for index, (true, predicted) in enumerate(zip(true_tags, predicted_tags)):
        if len(true) != len(predicted):
            raise ValueError(
                f"Sentence {index} has {len(true)} true tags but {len(predicted)} predicted tags."
            )
        for name, entities, tags in (
            ("true", true_entities, true),
            ("predicted", predicted_entities, predicted),
        ):
            try:
                found = extract_entities(tags)
            except ValueError as error:
                raise ValueError(f"Sentence {index} of the {name} tags: {error}") from None
            entities.update((index, *entity) for entity in found)

    correct = true_entities & predicted_entities
    types = sorted({e[1] for e in true_entities} | {e[1] for e in predicted_entities})

    def of_type(entities, entity_type):
        return sum(1 for e in entities if e[1] == entity_type)

    scores = _scores(len(true_entities), len(predicted_entities), len(correct))
    scores["per_type"] = {
        t: _scores(of_type(true_entities, t), of_type(predicted_entities, t), of_type(correct, t))
        for t in types
    }
    return scores


def _scores(support, predicted, correct):
    precision = correct / predicted if predicted else 0.0
    recall = correct / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "support": support,
        "predicted": predicted,
        "correct": correct,
    }


def _sentences(tags, name):
    if isinstance(tags, (str, bytes)):
        raise TypeError(f"`{name}` must be a list of sentences (lists of tags), got a string.")
    sentences = list(tags)
    for index, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"`{name}` must be a list of sentences, each a list of tags; item {index} is the "
                f"string {sentence!r} (wrap a single sentence in a list)."
            )
    return [list(sentence) for sentence in sentences]
