"""Tiny ALBERT pieces made offline: SentencePiece models trained on the shared data, the reference's
text preparation, and Hugging Face ALBERT checkpoints written from keras-hub backbones."""

import functools
import io
import json
import os
import unicodedata

import numpy as np

from tests.preprocessing.conftest import data_file, squad_contexts
WORD_START = "\u2581"


def albert_prepare(text, lowercase=True, strip_accents=True):
    """The reference ALBERT tokenizer's text preparation (Hugging Face's `AlbertTokenizer`), in plain Python."""
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if strip_accents:
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    if lowercase:
        text = text.lower()
    return text


def albert_reference_ids(processor, text, lowercase=True, strip_accents=True):
    """Token ids of the reference ALBERT tokenizer: prepared text, SentencePiece, digit-comma pieces split."""
    pieces = []
    for piece in processor.encode(albert_prepare(text, lowercase, strip_accents), out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            parts = processor.encode(piece[:-1].replace(WORD_START, ""), out_type=str)
            if not piece.startswith(WORD_START) and parts and parts[0].startswith(WORD_START):
                parts = parts[1:] if parts[0] == WORD_START else [parts[0][1:]] + parts[1:]
            pieces += parts + [","]
        else:
            pieces.append(piece)
    return [processor.piece_to_id(piece) for piece in pieces]


def training_lines():
    """About 4,000 prepared lines: WikiText-2 validation, SQuAD contexts and SST-2 dev."""
    with open(data_file("wikitext-2-raw", "wiki.valid.raw"), encoding="utf-8") as f:
        wiki = [line for line in f.read().splitlines() if line.strip()][:2500]
    with open(data_file("glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        sst2 = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    return [albert_prepare(line) for line in wiki + squad_contexts(700) + sst2]


@functools.cache
def albert_sentence_piece_model(vocabulary_size=800):
    """The bytes of a unigram SentencePiece model with ALBERT's special pieces at ids 0 to 4.

    `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3 (control pieces) and `[MASK]` 4
    (user-defined), as in ALBERT's `spiece.model`.
    """
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()),
        model_writer=model,
        vocab_size=vocabulary_size,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        pad_piece="<pad>",
        unk_piece="<unk>",
        control_symbols=["[CLS]", "[SEP]"],
        user_defined_symbols=["[MASK]"],
        character_coverage=0.9995,
        minloglevel=2,
        num_threads=1,
    )
    return model.getvalue()


def random_backbone(proto, num_layers, num_groups, num_inner_repetitions, seed=5):
    """A keras-hub AlbertBackbone with random (not initial) weights, dropout 0."""
    import keras
    import keras_hub
    import sentencepiece

    keras.utils.set_random_seed(seed)
    vocabulary_size = sentencepiece.SentencePieceProcessor(model_proto=proto).get_piece_size()
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=2, embedding_dim=8,
        hidden_dim=16, intermediate_dim=32, num_groups=num_groups,
        num_inner_repetitions=num_inner_repetitions, max_sequence_length=32,
    )
    rng = np.random.default_rng(seed)
    backbone.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in backbone.get_weights()])
    return backbone


def huggingface_tensors(backbone, prefix="albert."):
    """The backbone's weights under Hugging Face's AlbertModel names and layouts, written here by hand."""
    def weight(path):
        return np.asarray(next(w for w in backbone.weights if w.path == path).numpy())

    def dense(layer):
        kernel = weight(f"{layer}/kernel")
        return kernel.reshape(kernel.shape[0], -1).T, weight(f"{layer}/bias").reshape(-1)

    tensors = {
        "embeddings.word_embeddings.weight": weight("token_embedding/embeddings"),
        "embeddings.position_embeddings.weight": weight("position_embedding/embeddings"),
        "embeddings.token_type_embeddings.weight": weight("segment_embedding/embeddings"),
        "embeddings.LayerNorm.weight": weight("embeddings_layer_norm/gamma"),
        "embeddings.LayerNorm.bias": weight("embeddings_layer_norm/beta"),
    }
    tensors["encoder.embedding_hidden_mapping_in.weight"], tensors["encoder.embedding_hidden_mapping_in.bias"] = (
        dense("embedding_projection")
    )
    tensors["pooler.weight"], tensors["pooler.bias"] = dense("pooled_dense")
    for g in range(backbone.num_groups):
        for k in range(backbone.num_inner_repetitions):
            block, name = f"group_{g}_inner_layer_{k}", f"encoder.albert_layer_groups.{g}.albert_layers.{k}"
            for ours, theirs in [("query", "query"), ("key", "key"), ("value", "value")]:
                kernel = weight(f"{block}/self_attention_layer/{ours}/kernel")  # (H, heads, head_dim)
                tensors[f"{name}.attention.{theirs}.weight"] = kernel.reshape(kernel.shape[0], -1).T
                tensors[f"{name}.attention.{theirs}.bias"] = weight(f"{block}/self_attention_layer/{ours}/bias").reshape(-1)
            kernel = weight(f"{block}/self_attention_layer/attention_output/kernel")  # (heads, head_dim, H)
            tensors[f"{name}.attention.dense.weight"] = kernel.reshape(-1, kernel.shape[-1]).T
            tensors[f"{name}.attention.dense.bias"] = weight(f"{block}/self_attention_layer/attention_output/bias")
            for ours, theirs in [("self_attention_layer_norm", "attention.LayerNorm"),
                                 ("feedforward_layer_norm", "full_layer_layer_norm")]:
                tensors[f"{name}.{theirs}.weight"] = weight(f"{block}/{ours}/gamma")
                tensors[f"{name}.{theirs}.bias"] = weight(f"{block}/{ours}/beta")
            for ours, theirs in [("feedforward_intermediate_dense", "ffn"), ("feedforward_output_dense", "ffn_output")]:
                tensors[f"{name}.{theirs}.weight"], tensors[f"{name}.{theirs}.bias"] = dense(f"{block}/{ours}")
    return {prefix + name: value for name, value in tensors.items()}


def write_huggingface_albert(folder, backbone, proto, heads=None, config_changes=None, prefix="albert."):
    """A Hugging Face ALBERT folder (config.json, model.safetensors, spiece.model) of a keras-hub backbone."""
    from safetensors.numpy import save_file

    os.makedirs(folder)
    config = {
        "model_type": "albert", "architectures": ["AlbertForPreTraining"],
        "vocab_size": backbone.vocabulary_size, "embedding_size": backbone.embedding_dim,
        "hidden_size": backbone.hidden_dim, "num_hidden_layers": backbone.num_layers,
        "num_hidden_groups": backbone.num_groups, "inner_group_num": backbone.num_inner_repetitions,
        "num_attention_heads": backbone.num_heads, "intermediate_size": backbone.intermediate_dim,
        "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": backbone.max_sequence_length, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "initializer_range": 0.02,
    }
    config.update(config_changes or {})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    tensors = huggingface_tensors(backbone, prefix)
    tensors.update(heads or {})
    tensors = {name: np.ascontiguousarray(value) for name, value in tensors.items()}
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(proto)
    return folder
