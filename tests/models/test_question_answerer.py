import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.data import task_dataset
from kbert.models.optimization import WarmupLinearDecay
from kbert.preprocessing.question_answerer_preprocessor import keyword_examples
from tests.test_case import (
    assert_all_close,
    numpy,
    run_config_round_trip,
    run_task_test,
    tiny_encoder_kwargs,
    TINY_VOCABULARY,
)

SEQUENCE_LENGTH = 16
# 16 tokens: the(0) cat sat on the mat .(6) a dog(8) sat(9) on the mat . the film(15)
LONG_CONTEXT = "the cat sat on the mat . a dog sat on the mat . the film"
NON_ASCII_CONTEXT = "Zoë's café: 東京 🤗 naïve e\u0301te\u0301 Ω sat!"


def tiny_answerer(sequence_length=SEQUENCE_LENGTH, vocabulary=TINY_VOCABULARY, **kwargs):
    kwargs = {"doc_stride": 3, "max_question_length": 4, **kwargs}
    preprocessor = kbert.TextPacker(kbert.Tokenizer(vocabulary), sequence_length)
    encoder = kbert.Encoder(**tiny_encoder_kwargs(len(vocabulary)))
    return kbert.QuestionAnswerer(encoder, preprocessor, **kwargs)


@pytest.fixture(scope="module")
def answerer():
    return tiny_answerer()


def answer_record(question, context, text, answer_start=None):
    start = context.index(text) if answer_start is None else answer_start
    return {"question": question, "context": context, "answers": [{"text": text, "answer_start": start}]}


def training_set():
    """Two questions about each context: what sat, and on what; the words move around."""
    train, held_out = [], []
    for prefix in ["", "see you soon . ", "a good film . ", "free prize now ! "]:
        for animal in ["cat", "dog"]:
            for thing in ["mat", "film", "prize"]:
                context = f"{prefix}the {animal} sat on the {thing} ."
                records = [
                    answer_record("who sat ?", context, animal, len(prefix) + 4),
                    answer_record("sat on the ?", context, thing, context.rindex(thing)),
                ]
                unseen = (prefix, animal, thing) in [("a good film . ", "dog", "prize"), ("see you soon . ", "cat", "film")]
                (held_out if unseen else train).extend(records)
    return train, held_out


@pytest.fixture(scope="module")
def trained():
    """A tiny answerer fine-tuned on `training_set` (seeded), with the data."""
    keras.utils.set_random_seed(0)
    model = tiny_answerer(sequence_length=24, doc_stride=4)
    model.compile(learning_rate=3e-3)
    train, held_out = training_set()
    # One long epoch: each new tf.data iterator costs seconds of graph set-up.
    history = model.fit(train * 15, batch_size=8, epochs=1, verbose=0, validation_data=held_out)
    return model, train, held_out, history


@pytest.mark.all_backends
def test_task_harness(tmp_path):
    model = tiny_answerer()
    records = training_set()[0][:4] + [answer_record("who sat ?", LONG_CONTEXT, "dog")]
    # A dataset holds windows: what the input pipeline makes of the records.
    windows = task_dataset(model.preprocessor, records, batch_size=3)
    request = {"question": [r["question"] for r in records], "context": [r["context"] for r in records]}
    restored, logits = run_task_test(model, records, None, tmp_path, dataset=windows, request=request)
    window_counts = [len(logits_of["start_logits"]) for logits_of in logits]
    assert window_counts[:4] == [1, 1, 1, 1] and window_counts[4] > 1
    assert restored.answer(records) == model.answer(records)


# --- Windows ---------------------------------------------------------------


def test_long_context_gives_overlapping_windows(answerer):
    dog_sat = LONG_CONTEXT.index("dog sat")
    windows = answerer.preprocessor.build_windows(
        ["the cat sat on the mat now", "dog"],
        [LONG_CONTEXT, "a dog"],
        answer_starts=[dog_sat, 2],
        answer_ends=[dog_sat + len("dog sat"), 5],
    )
    tokenizer = answerer.preprocessor.tokenizer
    context_ids = numpy(tokenizer([LONG_CONTEXT])[0]).tolist()
    question_ids = numpy(tokenizer(["the cat sat on the mat now"])[0]).tolist()[:4]
    assert len(context_ids) == 16
    # Room for 16 - 3 - 4 = 9 context tokens; windows start at 0, 3, 6, 9.
    assert numpy(windows["example_index"]).tolist() == [0, 0, 0, 0, 1]
    token_ids = numpy(windows["token_ids"])
    for row, start in enumerate([0, 3, 6, 9]):
        piece = context_ids[start : start + 9]
        expected = [2] + question_ids + [3] + piece + [3]
        assert token_ids[row, : len(expected)].tolist() == expected
        assert numpy(windows["segment_ids"])[row].tolist() == [0] * 6 + [1] * (len(piece) + 1) + [0] * (9 - len(piece))
        assert numpy(windows["padding_mask"])[row].sum() == len(expected)
    # "dog sat" is tokens 8-9: whole in windows 1 (tokens 3-11) and 2 (6-14), cut in 0, absent in 3.
    assert numpy(windows["start_positions"]).tolist() == [0, 6 + 8 - 3, 6 + 8 - 6, 0, 4]
    assert numpy(windows["end_positions"]).tolist() == [0, 6 + 9 - 3, 6 + 9 - 6, 0, 4]
    # Each context position knows its characters; elsewhere -1.
    starts, ends = numpy(windows["token_char_starts"]), numpy(windows["token_char_ends"])
    words = LONG_CONTEXT.split()
    for row, start in enumerate([0, 3, 6, 9]):
        context_part = starts[row] >= 0
        assert np.flatnonzero(context_part).tolist() == list(range(6, 6 + min(9, 16 - start)))
        assert [LONG_CONTEXT[s:e] for s, e in zip(starts[row][context_part], ends[row][context_part])] == words[start : start + 9]
        assert (ends[row][~context_part] == -1).all()


def test_every_context_token_is_in_a_window(answerer):
    context = " ".join(["the cat sat on the mat ."] * 9)  # 63 tokens
    windows = answerer.preprocessor.build_windows(["who ?"], [context])
    starts = numpy(windows["token_char_starts"])
    covered = sorted({s for s in starts.ravel().tolist() if s >= 0})
    tokens = numpy(answerer.preprocessor.tokenizer.tokenize_with_offsets([context])[1][0]).tolist()
    assert covered == tokens
    # Room is 16 - 3 - 2 = 11 with a 2-token question ("who" is [UNK]): windows start at
    # 0, 3, ..., until one reaches token 62.
    assert len(starts) == (63 - 11 + 2) // 3 + 1


def test_stride_longer_than_the_room_is_cut_to_it():
    model = tiny_answerer(doc_stride=100)
    windows = model.preprocessor.build_windows(["the cat"], [LONG_CONTEXT])
    # Room 16 - 3 - 2 = 11: windows at tokens 0 and 11, nothing skipped.
    assert len(windows["token_ids"]) == 2
    first = numpy(windows["token_char_starts"])
    assert first[1][first[1] >= 0][0] == LONG_CONTEXT.index("the mat . the film")


def test_question_longer_than_the_window_is_truncated(answerer):
    long_question = " ".join(["the cat sat on the mat"] * 20)
    windows = answerer.preprocessor.build_windows([long_question], ["a dog"])
    assert numpy(windows["token_ids"])[0, :8].tolist() == [2, 5, 7, 9, 10, 3, 6, 8]
    with pytest.raises(ValueError, match=r"`max_question_length` 13 leaves no room .* use at most 12"):
        tiny_answerer(max_question_length=13)


def test_short_empty_and_one_character_contexts(answerer):
    windows = answerer.preprocessor.build_windows(["the cat", "the cat", "the cat"], ["a", "", "  "])
    assert numpy(windows["token_ids"])[:, :6].tolist() == [[2, 5, 7, 3, 6, 3], [2, 5, 7, 3, 3, 0], [2, 5, 7, 3, 3, 0]]
    assert numpy(windows["token_char_starts"])[0, 4] == 0 and numpy(windows["token_char_ends"])[0, 4] == 1


# --- Decoding ----------------------------------------------------------------


def assert_same_answers(a, b):
    """Equal answers: the same spans and texts, scores equal to float precision."""
    a, b = (x if isinstance(x, list) else [x] for x in (a, b))
    assert [(x["text"], x["start"], x["end"]) for x in a] == [(x["text"], x["start"], x["end"]) for x in b]
    np.testing.assert_allclose([x["score"] for x in a], [x["score"] for x in b], rtol=1e-5, atol=1e-6)


def decode(model, windows, start_logits, end_logits):
    result = model.preprocessor.decode(tf.constant(start_logits, tf.float32), tf.constant(end_logits, tf.float32), windows)
    return {name: numpy(value) for name, value in result.items()}


def decode_in_batches(model, windows, start_logits, end_logits, questions=8):
    """`decode`, a few questions at a time as `predict` decodes batches (all 399 at once took 10 GB)."""
    example_index = numpy(windows["example_index"])
    results = []
    for begin in range(0, len(windows["contexts"]), questions):
        rows = (example_index >= begin) & (example_index < begin + questions)
        batch = {name: tf.boolean_mask(value, rows) for name, value in windows.items() if name != "contexts"}
        batch["example_index"] -= begin
        batch["contexts"] = windows["contexts"][begin : begin + questions]
        results.append(decode(model, batch, np.asarray(start_logits)[rows], np.asarray(end_logits)[rows]))
    return {name: np.concatenate([r[name] for r in results]) for name in results[0]}


def brute_force_candidates(model, windows, start_logits, end_logits, example):
    """Every allowed span of one question, widened to words, best score per character span, best first."""
    starts, ends = numpy(windows["word_char_starts"]), numpy(windows["word_char_ends"])
    best = {}
    for row in np.flatnonzero(numpy(windows["example_index"]) == example):
        positions = np.flatnonzero(starts[row] >= 0)
        for i in positions:
            for j in positions[(positions >= i) & (positions < i + model.preprocessor.max_answer_length)]:
                span = (int(starts[row, i]), int(ends[row, j]))
                best[span] = max(best.get(span, -np.inf), start_logits[row, i] + end_logits[row, j])
    return sorted(best.items(), key=lambda item: -item[1])


def test_decoding_matches_brute_force_on_random_logits():
    model = tiny_answerer(max_answer_length=3, n_best=5)
    contexts = [LONG_CONTEXT, "a dogs sat", "the mats"]  # "dogs" and "mats" are two tokens each
    windows = model.preprocessor.build_windows(["the cat", "a dog", "sat"], contexts)
    rng = np.random.default_rng(0)
    start_logits, end_logits = rng.normal(size=(2, len(windows["token_ids"]), SEQUENCE_LENGTH))
    result = decode(model, windows, start_logits, end_logits)
    for example, context in enumerate(contexts):
        expected = brute_force_candidates(model, windows, start_logits, end_logits, example)[:5]
        count = result["candidate_counts"][example]
        assert count == len(expected)
        spans = list(zip(result["candidate_starts"][example][:count], result["candidate_ends"][example][:count]))
        assert spans == [span for span, _ in expected]
        np.testing.assert_allclose(result["candidate_scores"][example][:count], [s for _, s in expected], rtol=1e-6)
        assert [t.decode() for t in result["candidate_texts"][example][:count]] == [context[s:e] for s, e in spans]
        (best_start, best_end), best_score = expected[0]
        assert (result["start"][example], result["end"][example]) == (best_start, best_end)
        assert result["text"][example].decode() == context[best_start:best_end]
        np.testing.assert_allclose(result["score"][example], best_score, rtol=1e-6)


def position(windows, row, char_start):
    """The position in window `row` of the context token that starts at `char_start`."""
    (found,) = np.flatnonzero(numpy(windows["token_char_starts"])[row] == char_start)
    return int(found)


def hand_logits(windows, spans, low=-10.0):
    """Start and end logits that are `low` except at the given (row, position, start, end) values."""
    shape = windows["token_ids"].shape
    start_logits, end_logits = np.full(shape, low), np.full(shape, low)
    for row, position, start_value, end_value in spans:
        start_logits[row, position] = max(start_logits[row, position], start_value)
        end_logits[row, position] = max(end_logits[row, position], end_value)
    return start_logits, end_logits


def test_answers_are_whole_words(answerer):
    context = "the cats sat, dogs sating"  # the cat ##s sat , dog ##s sat ##ing
    windows = answerer.preprocessor.build_windows(["the"], [context])
    pieces = [context[s:e] for s, e in zip(numpy(windows["token_char_starts"][0]), numpy(windows["token_char_ends"][0])) if s >= 0]
    assert pieces == ["the", "cat", "s", "sat", ",", "dog", "s", "sat", "ing"]

    context_positions = np.flatnonzero(numpy(windows["token_char_starts"][0]) >= 0)

    def answer(first_piece, last_piece):
        first, last = context_positions[first_piece], context_positions[last_piece]
        start_logits, end_logits = hand_logits(windows, [(0, first, 5.0, -10), (0, last, -10, 5.0)])
        return decode(answerer, windows, start_logits, end_logits)["text"][0].decode()

    assert answer(2, 2) == "cats"  # the "##s" of "cats" alone
    assert answer(8, 8) == "sating"
    assert answer(5, 6) == "dogs"
    assert answer(3, 4) == "sat,"  # punctuation is a word of its own
    assert answer(2, 8) == "cats sat, dogs sating"


def test_best_span_across_windows(answerer):
    windows = answerer.preprocessor.build_windows(["the cat"], [LONG_CONTEXT])
    assert len(windows["token_ids"]) == 3  # room 16 - 3 - 2 = 11: at tokens 0, 3 and 6
    cat, film = LONG_CONTEXT.index("cat"), LONG_CONTEXT.index("film")
    # The first window favours "cat" a little; the last favours "film" more.
    start_logits, end_logits = hand_logits(
        windows, [(0, position(windows, 0, cat), 2.0, 2.0), (2, position(windows, 2, film), 3.0, 3.0)]
    )
    result = decode(answerer, windows, start_logits, end_logits)
    assert result["text"][0].decode() == "film"
    assert LONG_CONTEXT[result["start"][0] : result["end"][0]] == "film"
    assert result["score"][0] == 6.0


def test_span_never_ends_before_it_starts(answerer):
    context = "the cat sat on the mat"
    windows = answerer.preprocessor.build_windows(["the cat"], [context])
    cat, on, the = (position(windows, 0, context.index(word)) for word in ("cat", "on", "the mat"))
    # The best end ("cat") comes before the best start ("on").
    start_logits, end_logits = hand_logits(windows, [(0, on, 5.0, -10), (0, cat, -10, 5.0), (0, the, -10, 1.0)])
    result = decode(answerer, windows, start_logits, end_logits)
    assert result["text"][0].decode() == "on the"
    assert result["score"][0] == 6.0


def test_answer_length_is_limited(answerer):
    model = tiny_answerer(max_answer_length=2)
    context = "the cat sat on the mat"
    windows = model.preprocessor.build_windows(["the cat"], [context])
    the, sat, on = (position(windows, 0, context.index(word)) for word in ("the", "sat", "on"))
    # "the cat sat on" scores best but is 4 tokens long.
    start_logits, end_logits = hand_logits(windows, [(0, the, 5.0, -10), (0, on, -10, 5.0), (0, sat, 1.0, -10)])
    result = decode(model, windows, start_logits, end_logits)
    assert result["text"][0].decode() == "sat on"
    result = decode(answerer, windows, start_logits, end_logits)  # max_answer_length 15
    assert result["text"][0].decode() == "the cat sat on"


def test_answers_come_from_the_context_only(answerer):
    windows = answerer.preprocessor.build_windows(["the cat"], ["a dog"])
    # [CLS] the cat [SEP] a dog [SEP] [PAD]...: all but "a" (4) and "dog" (5) score highest.
    high = [(0, p, 9.0, 9.0) for p in (0, 1, 2, 3, 6, 7, 15)]
    start_logits, end_logits = hand_logits(windows, high + [(0, 4, 0.5, 0.5), (0, 5, 1.0, 1.0)])
    result = decode(answerer, windows, start_logits, end_logits)
    assert result["text"][0].decode() == "dog" and result["score"][0] == 2.0
    assert result["candidate_counts"][0] == 3  # "dog", "a dog", "a"
    assert [t.decode() for t in result["candidate_texts"][0][:3]] == ["dog", "a dog", "a"]


def test_null_score_threshold():
    windows_model = tiny_answerer()
    windows = windows_model.preprocessor.build_windows(["the cat", "the cat"], [LONG_CONTEXT, "a dog"])
    rows = len(windows["token_ids"])
    # Question 0: [CLS] scores 1 + 1 in every window; its best span "cat" 2 + 2.
    # Question 1: [CLS] 4 + 4; its best span "dog" 1 + 1.
    cat = position(windows, 0, LONG_CONTEXT.index("cat"))
    spans = [(row, 0, 1.0, 1.0) for row in range(rows - 1)] + [(0, cat, 2.0, 2.0)]
    spans += [(rows - 1, 0, 4.0, 4.0), (rows - 1, position(windows, rows - 1, 2), 1.0, 1.0)]
    start_logits, end_logits = hand_logits(windows, spans)
    always = decode(windows_model, windows, start_logits, end_logits)
    assert [t.decode() for t in always["text"]] == ["cat", "dog"]
    np.testing.assert_allclose(always["null_score"], [2.0, 8.0])
    for threshold, expected in [(0.0, ["cat", ""]), (5.0, ["cat", ""]), (6.0, ["cat", "dog"]), (-3.0, ["", ""])]:
        model = kbert.QuestionAnswerer(
            windows_model.encoder, windows_model.preprocessor.packer, doc_stride=3, max_question_length=4,
            null_score_threshold=threshold,
        )
        result = decode(model, windows, start_logits, end_logits)
        assert [t.decode() for t in result["text"]] == expected, threshold
        null = np.array([e == "" for e in expected])
        assert (result["start"][null] == 0).all() and (result["end"][null] == 0).all()
        np.testing.assert_allclose(result["score"][null], always["null_score"][null])


# --- Characters ----------------------------------------------------------------


def test_offsets_are_characters_on_non_ascii_text():
    vocabulary = TINY_VOCABULARY + ["zoe", "'", "cafe", ":", "東", "京", "naive", "ete", "ω"]
    model = tiny_answerer(vocabulary=vocabulary, sequence_length=32, max_question_length=4)
    windows = model.preprocessor.build_windows(["the cat"], [NON_ASCII_CONTEXT])
    starts, ends = numpy(windows["token_char_starts"])[0], numpy(windows["token_char_ends"])[0]
    pieces = [NON_ASCII_CONTEXT[s:e] for s, e in zip(starts, ends) if s >= 0]
    assert pieces == ["Zoë", "'", "s", "café", ":", "東", "京", "🤗", "naïve", "e\u0301te\u0301", "Ω", "sat", "!"]
    tokens = [model.preprocessor.tokenizer.id_to_token(i) for i in numpy(windows["token_ids"])[0][starts >= 0]]
    assert tokens[:8] == ["zoe", "'", "[UNK]", "cafe", ":", "東", "京", "[UNK]"]
    # Every candidate span, on random logits, maps back to exactly its text.
    rng = np.random.default_rng(1)
    start_logits, end_logits = rng.normal(size=(2, 1, 32))
    result = decode(model, windows, start_logits, end_logits)
    for start, end, text in zip(result["candidate_starts"][0], result["candidate_ends"][0], result["candidate_texts"][0]):
        assert NON_ASCII_CONTEXT[start:end] == text.decode()


# --- Training and prediction --------------------------------------------------


def test_fit_learns_to_answer(trained):
    model, train, held_out, history = trained
    assert np.isfinite(history.history["loss"][0]) and np.isfinite(history.history["val_loss"][0])
    assert model.evaluate_squad(train, verbose=0) == {"exact_match": 100.0, "f1": 100.0}
    # Combinations never seen in training.
    answers = model.answer(held_out)
    assert [a["text"] for a in answers] == [r["answers"][0]["text"] for r in held_out]
    # Keras' evaluate scores the windows: the targets' start and end positions.
    assert history.history["val_start_logits_accuracy"][0] > 0.5
    assert history.history["val_end_logits_accuracy"][0] > 0.5


def test_predict_forms_and_exact_offsets(trained):
    model = trained[0]
    context = "the dog sat on the mat . " + NON_ASCII_CONTEXT + " 🤗 the cat sat on the film ."
    single = model.answer(question="who sat ?", context=context)
    assert sorted(single) == ["end", "score", "start", "text"]
    assert context[single["start"] : single["end"]] == single["text"] and single["text"]
    batch = model.answer(questions=["who sat ?", "sat on the ?", "who sat ?"], contexts=[context, context, "a"], verbose=0)
    assert_same_answers(batch[0], single)
    assert batch[2]["text"] == "a" and (batch[2]["start"], batch[2]["end"]) == (0, 1)
    as_tuple = model.answer((["who sat ?"], [context]))
    assert_same_answers(as_tuple, [single])
    # The keyword form of `predict` is deprecated in favour of `answer`.
    with pytest.warns(DeprecationWarning, match="answer"):
        assert_same_answers(model.predict(question="who sat ?", context=context), single)
    # `predict` gives the logits of the question's windows; the best span's score is theirs.
    (logits,) = model.predict((["who sat ?"], [context]), verbose=0)
    assert logits["start_logits"].shape == logits["end_logits"].shape
    best = (logits["start_logits"][..., :, None] + logits["end_logits"][..., None, :]).max()
    assert best >= single["score"] - 1e-4
    top = model.answer(question="who sat ?", context=context, top_k=4)
    assert len(top) == 4
    assert_same_answers(top[0], single)
    assert [t["score"] for t in top] == sorted((t["score"] for t in top), reverse=True)
    assert len({(t["start"], t["end"]) for t in top}) == 4
    assert all(context[t["start"] : t["end"]] == t["text"] for t in top)
    # Batches of questions give the same answers as one by one.
    in_batches = model.answer(questions=["who sat ?"] * 3, contexts=[context] * 3, batch_size=2, verbose=0)
    assert_same_answers(in_batches, [single] * 3)


def test_fit_input_forms_give_the_same_windows(answerer):
    records = [answer_record("who sat ?", LONG_CONTEXT, "dog"), answer_record("on ?", "a cat sat on a mat", "a mat")]
    questions = [r["question"] for r in records]
    contexts = [r["context"] for r in records]
    answers = [r["answers"][0] for r in records]
    forms = [
        task_dataset(answerer.preprocessor, records),
        task_dataset(answerer.preprocessor, (questions, contexts), answers),
        task_dataset(answerer.preprocessor, (questions, contexts), [[a] for a in answers]),
        task_dataset(answerer.preprocessor, keyword_examples(questions, contexts, [a["answer_start"] for a in answers], [a["text"] for a in answers])),
    ]
    batches = [list(dataset) for dataset in forms]
    for other in batches[1:]:
        assert_all_close(batches[0], other)
    assert int(forms[0].cardinality()) == 1
    targets = batches[0][0][1]
    # "who ?" is 3 tokens ([UNK] sat ?): room 10, windows at tokens 0, 3, 6; the context
    # starts at position 5 and "dog" is token 8. "a mat" is tokens 4-5 after "on ?" (2).
    assert numpy(targets["start_logits"]).tolist() == [8 + 5, 8 - 3 + 5, 8 - 6 + 5, 4 + 4]
    assert numpy(targets["end_logits"]).tolist() == [8 + 5, 8 - 3 + 5, 8 - 6 + 5, 5 + 4]


def test_bad_training_answers_are_named(answerer):
    record = answer_record("who sat ?", "the cat sat on the mat", "cat")
    wrong = {**record, "answers": [{"text": "dog", "answer_start": 4}]}
    with pytest.raises(ValueError, match=r"Answer 1 \('dog'\) at character 4 does not match its context there \('cat'\)"):
        answerer.fit([record, wrong], verbose=0)
    blank = {**record, "answers": [{"text": " ", "answer_start": 3}]}
    with pytest.raises(ValueError, match=r"Answer 1 \(' '\) covers no token"):
        answerer.fit([record, blank], verbose=0)
    with pytest.raises(ValueError, match="Got 1 questions but 2 answers"):
        answerer.fit((["q"], ["c"]), [record["answers"][0]] * 2, verbose=0)
    with pytest.raises(TypeError, match="questions\\[0\\] is a int"):
        answerer.answer(questions=[3], contexts=["c"])
    with pytest.raises(ValueError, match="`top_k` must be None or from 1 to `n_best` \\(20\\)"):
        answerer.answer(question="q", context="c", top_k=21)


def test_config_round_trip_and_save_load(trained, tmp_path):
    model = trained[0]
    windows = model.preprocessor.build_windows(["who sat ?"], ["the cat sat on the mat ."])
    inputs = {name: windows[name] for name in ("token_ids", "segment_ids", "padding_mask")}
    restored = run_config_round_trip(model, inputs)
    assert restored.preprocessor.doc_stride == 4 and restored.preprocessor.null_score_threshold is None

    path = os.path.join(tmp_path, "qa.keras")
    model.save(path)
    loaded = kbert.load_model(path)
    assert type(loaded) is kbert.QuestionAnswerer and loaded.get_config() == model.get_config()
    assert_all_close(loaded(inputs), model(inputs), atol=1e-6)
    _, _, held_out, _ = trained
    assert_same_answers(loaded.answer(held_out), model.answer(held_out))
    # The optimizer comes back with its state and schedule, ready to train on.
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) > 0
    assert isinstance(loaded.optimizer._learning_rate, WarmupLinearDecay)
    # The pooler is not trained: nothing on the span path uses it.
    pooler = {id(w) for w in model.encoder.pooler_dense.weights}
    assert not pooler & {id(w) for w in model.trainable_weights}


def test_question_answerer_entry_point():
    model = kbert.question_answerer("tiny", vocabulary=TINY_VOCABULARY, sequence_length=32, max_question_length=8)
    assert model.encoder.hidden_dim == 128 and model.preprocessor.sequence_length == 32
    settings = model.preprocessor
    assert (settings.doc_stride, settings.max_question_length, settings.max_answer_length, settings.n_best) == (
        128, 8, 15, 20
    )
    with pytest.raises(ValueError, match="`max_question_length` 64 leaves no room"):
        kbert.question_answerer("tiny", vocabulary=TINY_VOCABULARY, sequence_length=64)
    with pytest.raises(ValueError, match="Give a `vocabulary`"):
        kbert.question_answerer("tiny")


@pytest.mark.slow
def test_answers_in_a_saved_model_loaded_without_kbert(trained, tmp_path):
    model = trained[0]
    module = tf.Module()
    module.model = model
    spec = tf.TensorSpec([None], tf.string)
    module.answer = tf.function(
        lambda questions, contexts: {
            name: value for name, value in model.preprocessor.answer_batch(model, questions, contexts).items()
            if name in ("text", "start", "end", "score")
        },
        input_signature=[spec, spec],
    )
    path = str(tmp_path / "qa")
    tf.saved_model.save(module, path)
    questions = ["who sat ?", "sat on the ?"]
    contexts = ["the dog sat on the " + NON_ASCII_CONTEXT, "a"]
    expected = model.answer(questions=questions, contexts=contexts, verbose=0)
    script = textwrap.dedent(
        f"""
        import sys, json
        import tensorflow as tf, tensorflow_text  # registers the TF-Text ops
        loaded = tf.saved_model.load({path!r})
        out = loaded.answer(tf.constant({questions!r}), tf.constant({contexts!r}))
        out["text"] = [t.decode("utf-8") for t in out["text"].numpy()]
        print(json.dumps({{k: v if isinstance(v, list) else v.numpy().tolist() for k, v in out.items()}}))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "kbert"))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "[]", f"kbert was imported: {lines[-1]}"
    served = json.loads(lines[-2])
    assert served["text"] == [a["text"] for a in expected]
    assert served["start"] == [a["start"] for a in expected] and served["end"] == [a["end"] for a in expected]
    np.testing.assert_allclose(served["score"], [a["score"] for a in expected], rtol=1e-5)


@pytest.mark.slow
def test_targets_decode_back_to_the_squad_answers():
    """On real SQuAD questions, logits that point at the training targets give back the answers."""
    records = kbert.data.load_squad(articles=list(kbert.data.SQUAD_EVAL_ARTICLES)[:2])
    # Every character is a token: the targets can hit any answer exactly.
    characters = sorted({c for r in records for text in (r["context"], r["question"]) for c in text if not c.isspace()})
    vocabulary = list(kbert.SPECIAL_TOKENS) + characters + ["##" + c for c in characters]
    preprocessor = kbert.TextPacker(kbert.Tokenizer(vocabulary, lowercase=False), 256)
    encoder = kbert.Encoder(vocabulary_size=len(vocabulary), num_layers=1, hidden_dim=8, num_heads=1,
                            intermediate_dim=8, max_sequence_length=256)
    model = kbert.QuestionAnswerer(encoder, preprocessor, doc_stride=64, max_question_length=32,
                                   max_answer_length=250, n_best=1)
    answers = [r["answers"][0] for r in records]
    windows = model.preprocessor.build_windows(
        [r["question"] for r in records], [r["context"] for r in records],
        [a["answer_start"] for a in answers], [a["answer_start"] + len(a["text"]) for a in answers],
    )
    assert len(windows["token_ids"]) > len(records)  # long contexts have several windows
    one_hot = tf.one_hot(windows["start_positions"], 256) * 10, tf.one_hot(windows["end_positions"], 256) * 10
    result = decode_in_batches(model, windows, *one_hot)
    predicted = [t.decode() for t in result["text"]]
    for record, text, start, end in zip(records, predicted, result["start"], result["end"]):
        assert record["context"][start:end] == text
        # Answers widen to whole words only: the gold answer is always inside.
        gold_start = record["answers"][0]["answer_start"]
        assert start <= gold_start and gold_start + len(record["answers"][0]["text"]) <= end
    exact = np.mean([p == a["text"] for p, a in zip(predicted, answers)])
    assert exact > 0.99
