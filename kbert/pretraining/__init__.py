"""Pretraining, from raw text to a pretrained encoder: the corpus pipeline, masking, pair building, `Pretrainer`, fill-mask.

In the order a corpus takes it: `documents` reads text files into documents
of sentences (streamed); `sentence_pair_builder` (`SentencePairBuilder`)
makes the segment pairs of next-sentence or sentence-order prediction, and
`text_pairs` streams them from the files, or `prepared_pairs` writes them
once as sharded TFRecords and reads them back; `masked_lm_masker`
(`MaskedLMMasker`) masks them in `tf.data`, and `pretraining_batches` batches
them; `corpus_progress` shows a long pass while it runs. `dataset` is the way
in, `pretraining_dataset` and `prepare_pretraining_data`, with its options as
`PretrainingSettings` (`pretraining_settings`) and its batches as
`PretrainingData` (`pretraining_data`). `pretrainer` holds `Pretrainer`, the
masked-LM and NSP (or SOP) heads on a `kbert.Encoder`; `fill_mask` holds
`FillMask` and `fill_mask`, which fill in `[MASK]` tokens with its head.

The public names are `kbert`'s (`kbert.pretraining_dataset`,
`kbert.Pretrainer`, ...). Nothing is imported here: `documents`,
`corpus_progress` and `sentence_pair_builder` are plain Python, the corpus
pipeline loads TensorFlow, and `Pretrainer` Keras.
"""
