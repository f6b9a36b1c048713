"""`tokenizer_from_vocabulary`: which tokenizer a `vocabulary` argument stands for."""

import kbert
from kbert.preprocessing.tokenizer_choice import tokenizer_from_vocabulary
from tests.albert import albert_sentence_piece_model
from tests.test_case import TINY_VOCABULARY


def test_a_token_list_or_vocab_txt_gives_wordpiece_and_a_tokenizer_is_kept(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(TINY_VOCABULARY) + "\n", encoding="utf-8")
    from_list = tokenizer_from_vocabulary(TINY_VOCABULARY, lowercase=False)
    from_path = tokenizer_from_vocabulary(str(path))
    assert type(from_list) is kbert.Tokenizer and type(from_path) is kbert.Tokenizer
    assert from_path.get_vocabulary() == TINY_VOCABULARY and not from_list.lowercase
    assert tokenizer_from_vocabulary(from_list) is from_list


def test_a_sentence_piece_model_as_bytes_or_a_model_path_gives_sentence_piece(tmp_path):
    proto = albert_sentence_piece_model()
    path = tmp_path / "spiece.model"
    path.write_bytes(proto)
    for vocabulary in (proto, str(path), path):
        assert type(tokenizer_from_vocabulary(vocabulary)) is kbert.SentencePieceTokenizer
