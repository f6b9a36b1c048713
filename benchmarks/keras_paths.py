"""What the Keras paths of the GPU and host-work benchmarks share: keras-hub's classifier, a loss read each step."""

LEARNING_RATE = 5e-5


def reads_the_loss():
    """A callback that reads the loss after every training step, as Keras' progress bar does."""
    import keras

    class ReadsTheLoss(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])

    return ReadsTheLoss()


def keras_hub_classifier(shape, max_sequence_length, dtype=None, learning_rate=LEARNING_RATE):
    """A two-class classifier of token ids: keras-hub's `BertBackbone`, dropout 0.1 and a Dense head on `[CLS]`.

    What `keras_hub.models.BertTextClassifier` computes, as a plain
    functional `keras.Model`: its `fit` is Keras' own, which takes arrays on
    every backend (keras-hub's task `fit` converts them to `tf.data`, and
    without TensorFlow refuses them). Compiled with AdamW (weight decay
    0.01), cross-entropy on logits and accuracy.
    """
    import keras
    import keras_hub

    backbone = keras_hub.models.BertBackbone(**shape, max_sequence_length=max_sequence_length, dtype=dtype)
    pooled = keras.layers.Dropout(0.1, dtype=dtype)(backbone.output["pooled_output"])
    logits = keras.layers.Dense(2, dtype=dtype, name="logits")(pooled)
    model = keras.Model(backbone.input, logits)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate, weight_decay=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
    )
    return model
