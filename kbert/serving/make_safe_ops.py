"""Writes `safe_ops.txt`: the ops kbert runs in a SavedModel it did not make without asking.

A SavedModel is a program. Loading one runs its resource initializers, and
calling a signature runs its graph, so its ops can read and write any file
the user can (`ReadFile`, `WriteFile`, `MatchingFiles`, `SaveV2`, the
`tf.data` file readers), reach the network (`Send`, `Recv`, collective and
RPC ops), run Python (`PyFunc`, `EagerPyFunc`), or end the process
(`Abort`). kbert runs a SavedModel only when every op in it, in every
function of its library, is on this list (`kbert.serving.check_safe_to_load`);
`--trust` (`trust=True`) skips the check for a model the user trusts.

This list is not `allowed_ops.txt`, the ops TF Serving has: that one says
whether a model server can load a graph, this one whether running it can
reach anything outside the process's own memory.

The list is made from the op registry of this TensorFlow and TF-Text by
rules, so that each op is there for a reason that can be read here:

1. Stateless ops: TensorFlow marks every op with a side effect stateful,
   writes included. A few stateless ops still reach outside: they are left
   out by name (`_OUTSIDE`: files, `tf.data`, summaries, debugging, Python,
   networking, devices, checkpoints) or one by one (`_LEFT_OUT`, each with
   its reason). Ops that wait for another op's work (queues, barriers,
   accumulators, staging areas: `_WAITS`) are left out too: nothing in a
   served model feeds them, so they would hang the process. Ops whose names start with `_` are the runtime's own,
   never written in a graph by TensorFlow, and are left out.
2. Stateful ops that only touch the process's own memory, reviewed one by
   one (`_STATEFUL_IN_MEMORY`): variables, function calls and control flow,
   assertions, in-memory lookup tables, random numbers, tensor arrays, and
   the TF-Text tokenizers, which are built from bytes in the graph.

The saver functions of a TF2 SavedModel use `SaveV2`, `RestoreV2`,
`MergeV2Checkpoints` and `ShardedFilename`; they are not on this list. The
check allows the save ops only where nothing that loads can reach them, and
`RestoreV2` only in the restore function (see `kbert/serving/op_safety.py`).

Run it with kbert's environment after TensorFlow or TF-Text is upgraded:

    python kbert/serving/make_safe_ops.py
"""

import re
import sys
from pathlib import Path

# Families of stateless ops that reach files, the network, other devices or
# processes, or Python, by the words in their names.
_OUTSIDE = re.compile(
    r"Dataset|Iterator|File|Reader|Writer|Checkpoint|Summary|Summar|Debug|Print|Py|Rpc|Send|Recv|"
    r"Collective|Nccl|TPU|Tpu|Xla|Mlir|DTensor|Infeed|Outfeed|Save|Restore|Load|Snapshot|Sql|LMDB|Sleep|"
    r"Remote|Host"
)
# Ops that wait for another op to hand them something: in a model that only
# serves requests nothing ever does, so they would wait without end.
_WAITS = re.compile(r"Queue|Barrier|Accumulator|Stage|Notification")
# Stateless ops that reach outside though their names do not say so.
_LEFT_OUT = {
    "Abort": "ends the process",
    "ImmutableConst": "maps the file its `memory_region_name` names",
    "GenerateVocabRemapping": "reads vocabulary files",
    "DecodeProtoV2": "reads the descriptor file its `descriptor_source` names",
    "EncodeProto": "reads the descriptor file its `descriptor_source` names",
    "Copy": "sends to the debug URLs its `debug_ops_spec` names",
    "CopyHost": "sends to the debug URLs its `debug_ops_spec` names",
}
_STATEFUL_IN_MEMORY = """
    VarHandleOp ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp VarIsInitializedOp
    VariableShape DestroyResourceOp DisableCopyOnRead ResourceGather ResourceGatherNd ResourceScatterAdd
    ResourceScatterSub ResourceScatterMul ResourceScatterDiv ResourceScatterMin ResourceScatterMax
    ResourceScatterUpdate ResourceScatterNdAdd ResourceScatterNdSub ResourceScatterNdMin ResourceScatterNdMax
    ResourceScatterNdUpdate ResourceStridedSliceAssign Empty

    StatefulPartitionedCall If While Case Assert CheckNumerics CheckNumericsV2

    HashTableV2 MutableHashTableV2 MutableHashTableOfTensorsV2 MutableDenseHashTableV2 AnonymousHashTable
    AnonymousMutableHashTable AnonymousMutableHashTableOfTensors AnonymousMutableDenseHashTable
    InitializeTableV2 LookupTableFindV2 LookupTableImportV2 LookupTableInsertV2 LookupTableRemoveV2
    LookupTableSizeV2 LookupTableExportV2

    RandomUniform RandomUniformInt RandomStandardNormal TruncatedNormal ParameterizedTruncatedNormal
    Multinomial RandomShuffle RandomGamma RandomPoissonV2 StatefulUniform StatefulUniformInt
    StatefulUniformFullInt StatefulStandardNormalV2 StatefulTruncatedNormal StatefulRandomBinomial RngSkip
    RngReadAndSkip StatelessRandomGetAlg NonDeterministicInts

    TensorArrayV3 TensorArrayReadV3 TensorArrayWriteV3 TensorArrayGatherV3 TensorArrayScatterV3
    TensorArrayConcatV3 TensorArraySplitV3 TensorArraySizeV3 TensorArrayCloseV3 TensorArrayGradV3
    TensorArrayGradWithShape StackV2 StackPushV2 StackPopV2 StackCloseV2

    SentencepieceOp SentencepieceTokenizeOp SentencepieceTokenizeWithOffsetsOp SentencepieceDetokenizeOp
    SentencepieceIdToStringOp SentencepieceStringToIdOp SentencepieceVocabSizeOp WordpieceTokenizeWithOffsets
""".split()


def registered_ops():
    """`{name: OpDef}` of every op in this process's registry, TF-Text's included."""
    import tensorflow_text  # noqa: F401  (registers its ops)
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    buffer = pywrap_tf_session.TF_GetAllOpList()
    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(buffer))
    return {op.name: op for op in ops.op}


def safe_ops(registry):
    """The names of `registry`'s ops that the rules above count as safe to run."""
    safe = {
        name for name, op in registry.items()
        if not op.is_stateful and not name.startswith("_") and not _OUTSIDE.search(name) and name not in _LEFT_OUT
    }
    safe = {name for name in safe if not _WAITS.search(name)}
    return safe | (set(_STATEFUL_IN_MEMORY) & set(registry))


def main():
    import tensorflow
    import tensorflow_text

    registry = registered_ops()
    safe = safe_ops(registry)
    header = [
        "# Ops that only compute in the process's own memory: no file, network or process access, no Python.",
        f"# From TensorFlow {tensorflow.__version__} and TF-Text {tensorflow_text.__version__}: "
        f"{len(safe)} of {len(registry)} ops.",
        "# Not the ops TF Serving has (allowed_ops.txt). Made by kbert/serving/make_safe_ops.py, which says why.",
    ]
    path = Path(__file__).with_name("safe_ops.txt")
    path.write_text("\n".join(header + sorted(safe)) + "\n")
    print(f"Wrote {path}: {len(safe)} of {len(registry)} ops.")


if __name__ == "__main__":
    if len(sys.argv) != 1:
        raise SystemExit(__doc__)
    main()
