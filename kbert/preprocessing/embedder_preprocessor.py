"""The embedder's task preprocessor: texts in, sentence embeddings out."""

import keras

from kbert.backend.tensorflow_bridge import model_outputs
from kbert.preprocessing.task_preprocessor import TaskPreprocessor, run_by_length


@keras.saving.register_keras_serializable(package="kbert")
class EmbedderPreprocessor(TaskPreprocessor):
    """Texts or text pairs to model inputs; the model's outputs to `sentence_embedding`.

    Batches keep the packer's full `sequence_length` (so `token_features`
    of all batches have one shape); a serving request runs a few texts of
    similar length at a time, each run cut to its longest text. An embedder
    is used on single texts unless told otherwise (`text_pairs` defaults to
    False for its export). A pair is packed as one sequence, `[CLS] a [SEP]
    b [SEP]`, as everywhere in kbert.

    Args:
        packer: a `kbert.TextPacker`.
        text_pairs: whether the texts come in pairs; None until the first
            texts are seen.

    Example:
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]
    >>> packer = kbert.TextPacker(kbert.Tokenizer(vocab), sequence_length=8)
    >>> kbert.EmbedderPreprocessor(packer)(["the cat"])["padding_mask"].numpy().tolist()
    [[1, 1, 1, 1, 0, 0, 0, 0]]
    """

    # `token_features` keep the packer's full width, so batches concatenate.
    pads_to_longest = False

    def check_targets(self, y):
        raise ValueError("An embedder is not trained: give texts without labels.")

    def serving_inputs(self, text_pairs=None):
        if text_pairs is None and self.text_pairs is None:
            text_pairs = False
        return super().serving_inputs(text_pairs)

    def reverse(self, outputs):
        """The sentence embeddings of the model's outputs."""
        return {"sentence_embedding": outputs["sentence_embedding"]}

    def serve_token_ids(self, model, inputs):
        def sentence_embedding(rows):
            return model_outputs(model, rows)["sentence_embedding"]

        return {"sentence_embedding": run_by_length(sentence_embedding, inputs)}
