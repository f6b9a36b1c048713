"""kbert's fast paths on the TensorFlow backend: a block and an Adam update shaped for oneDNN."""

import math

import keras
import tensorflow as tf

from kbert.backend.portable import (  # noqa: F401 (the seam's)
    compile_transformer_blocks,
    random_state,
    restore_random_state,
)
# LoRA adapters' updates go beside the frozen kernels' matmuls: no kernel gradient is asked for.
from kbert.backend.portable import over_scores, with_lora_update

# Keras' step is a `tf.function` that takes batches of any width without retracing.
COMPILES_EACH_SHAPE = False


def transformer_block(block, inputs, padding_mask=None, training=None, return_attention_scores=False):
    """BERT's post-LayerNorm Transformer block on `block`'s variables, in a graph CPUs run fast.

    `block` is a built kbert block (`TransformerBlock`), whose
    sublayers hold the variables. The graph is shaped for TensorFlow's
    grappler remapper and its oneDNN kernels:

    - activations stay 2-D, `(batch * sequence, hidden_dim)`, so every
      projection is one `MatMul` (not an einsum's `BatchMatMulV2`), and
      `MatMul + BiasAdd (+ GELU)` fuse into one kernel;
    - the query, key and value projections are joined into one tensor and
      split into heads by one transpose;
    - attention scores are one batched `tf.matmul` with the scale and the
      padding mask applied in the same expression, which oneDNN fuses.

    With far fewer ops per block, small models (BERT-tiny, a served model
    answering one sentence) spend less time dispatching ops.
    """
    attention = block.self_attention_layer
    hidden_dim = inputs.shape[-1]
    heads, head_dim = attention.query_dense.kernel.shape[1:]
    width = heads * head_dim
    shape = tf.shape(inputs)
    batch_size, length = shape[0], shape[1]
    x = tf.reshape(inputs, [-1, hidden_dim])

    # Queries, keys and values side by side, then one transpose splits
    # heads: (3, batch, heads, sequence, head_dim). Three fused matmuls
    # whose outputs are joined, rather than one on the three kernels
    # joined: that join copies every kernel at every call, which costs
    # more than the matmuls on a short request (a served sentence: 10 %
    # of the blocks' time), and gains 1-2 % on large batches.
    projections = {"query": attention.query_dense, "key": attention.key_dense, "value": attention.value_dense}
    qkv = tf.concat(
        [with_lora_update(block, target, x, tf.nn.bias_add(tf.matmul(x, tf.reshape(p.kernel, [hidden_dim, width])),
                                                           tf.reshape(p.bias, [width])))
         for target, p in projections.items()],
        axis=1,
    )
    qkv = tf.transpose(tf.reshape(qkv, [batch_size, length, 3, heads, head_dim]), [2, 0, 3, 1, 4])
    # unstack, not indexing: its gradient is one stack, not three scatters into zeros.
    query, key, value = tf.unstack(qkv, 3)

    scores = tf.matmul(query, key, transpose_b=True) * tf.cast(1.0 / math.sqrt(head_dim), query.dtype)
    if padding_mask is not None:
        # Keys on padding (or of another example of a packed row) get a
        # large negative score: zero probability.
        blocked = 1.0 - tf.cast(over_scores(padding_mask), scores.dtype)
        scores = scores + blocked * _large_negative(scores.dtype)
    probabilities = tf.nn.softmax(scores, axis=-1)
    dropped = block.attention_probabilities_dropout(probabilities, training=training)
    context = tf.matmul(dropped, value)
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, width])
    output = attention.output_dense
    attended = tf.nn.bias_add(tf.matmul(context, tf.reshape(output.kernel, [width, hidden_dim])), output.bias)
    attended = with_lora_update(block, "attention_output", context, attended)
    attended = block.self_attention_dropout(attended, training=training)
    x = block.self_attention_layer_norm(attended + x)

    intermediate = block.feedforward_intermediate_dense
    # keras' GELU is `tf.nn.gelu`, whose ops the remapper fuses into the matmul.
    hidden = tf.nn.bias_add(tf.matmul(x, intermediate.kernel), intermediate.bias)
    hidden = block.activation(with_lora_update(block, "intermediate", x, hidden))
    output = block.feedforward_output_dense
    hidden = with_lora_update(block, "output", hidden, tf.nn.bias_add(tf.matmul(hidden, output.kernel), output.bias))
    hidden = block.feedforward_dropout(hidden, training=training)
    x = block.feedforward_layer_norm(hidden + x)

    x = tf.reshape(x, shape)
    if return_attention_scores:
        return x, probabilities
    return x


def _large_negative(dtype):
    # keras' masked softmax uses the same: -1e9, or what float16 can hold.
    return tf.constant(-3e4 if dtype == tf.float16 else -1e9, dtype)


class AdamW(keras.optimizers.AdamW):
    """keras' AdamW whose per-variable update is TensorFlow's one-kernel Adam.

    TensorFlow's Adam kernel updates both moments and the weights in one
    pass over memory, where keras' update is eleven element-wise ops, a pass
    each (a whole BERT-base update: 0.25 s against 0.36 s on 2 cores). The
    same formula; keras' own update remains for AMSGrad and under a
    distribution strategy (mirrored moments).
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or tf.distribute.has_strategy() or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
        )


def gradient_function(loss, variables):
    """`f(*args)`: the gradients of `loss(*args)` with respect to `variables`, as one graph."""

    @tf.function(reduce_retracing=True)
    def gradients(*args):
        with tf.GradientTape() as tape:
            value = loss(*args)
        return tape.gradient(value, variables)

    return gradients


def build_before_first_step(model, data=None):
    """Creates the optimizer's variables, and the metrics' and losses' for `data`, before `fit` traces its step.

    Keras on TensorFlow, without a distribution strategy, creates them while
    it traces the first training step. Variables made inside a trace make
    TensorFlow trace the step a second time (seconds for BERT-base), and the
    graphs of those traces stay in memory after the model is gone (about
    30 MB for a tiny BERT, more for larger ones): a process that trains
    several models, a notebook or a search over settings, grows with each.
    Built here, the step is traced once, and only the one graph TensorFlow
    itself keeps of each traced step (about 15 MB for a tiny BERT) stays. A
    `tf.data.Dataset` tells the shapes the metrics and losses are built
    for, as Keras does itself under a strategy; for other data only the
    optimizer is built.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not model.built:
        return
    with model.distribute_strategy.scope():
        spec = getattr(data, "element_spec", None)
        if isinstance(data, tf.data.Dataset) and all(
            isinstance(leaf, tf.TensorSpec) for leaf in tf.nest.flatten(spec)
        ):
            model._symbolic_build(data_batch=spec)  # Keras' own build, on the batches' shapes
        elif not optimizer.built:
            optimizer.build(model.trainable_variables)
