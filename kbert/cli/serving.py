"""`kbert export` and `kbert predict`: a trained model as a SavedModel for TF Serving, and run on texts.

Both run on TensorFlow, whatever backend the environment names: they write
and run TensorFlow SavedModels.
"""

import os
import sys

from kbert.cli.arguments import add_command, folder_of_the_out_file, positive_float, positive_int
from kbert.cli.model_files import add_base_argument, check_no_base, load_task_model

# The examples `kbert predict` sends to the model at a time.
PREDICT_BATCH_SIZE = 32


def add_commands(commands):
    export = add_command(commands, "export", "write a trained model as a SavedModel for TF Serving", _export,
                         check=_check_export, output_folders=_export_folders, backend="tensorflow")
    export.add_argument("model", help="a task model's .keras file (e.g. the model.keras of `kbert train`), or a "
                                      "LoRA adapter file (its model.adapter; adapters merged into the export)")
    add_base_argument(export)
    export.add_argument("--name", required=True,
                        help="the model's name, one folder name (letters, digits, '.', '_', '-'): writes "
                             "OUT/NAME/VERSION/")
    export.add_argument("--out", default="saved_models", help="the folder of served models")
    export.add_argument("--version", type=positive_int, default=None, help="default: one more than the highest")
    export.add_argument("--overwrite", action="store_true", help="replace an existing version")
    export.add_argument("--texts", choices=("single", "pairs"), default=None,
                        help="for a classifier or embedder: single texts or pairs (default: as trained)")

    predict = add_command(commands, "predict", "run an exported SavedModel or a .keras model on texts or a "
                          "file (one JSON line each)", _predict, check=_check_predict, backend="tensorflow",
                          output_folders=folder_of_the_out_file)
    predict.add_argument("saved_model", metavar="MODEL",
                         help="a model folder of versions (saved_models/spam), a version folder, a task "
                              "model's .keras file, or a LoRA adapter file (the model.adapter of `kbert train`)")
    predict.add_argument("texts", nargs="*", help="texts, grouped per example in the model's input order: "
                                                  "text [text_pair] | question context | context choice...")
    predict.add_argument("--file", help="a CSV, TSV or JSON Lines file of examples (columns as for kbert train; "
                                        "an id column is kept), or any other file of texts, one per line, "
                                        "after any given as arguments ('-': standard input; bytes are sent "
                                        "as they are, whatever their encoding)")
    predict.add_argument("--out", help="write the predictions to this JSON Lines file (written whole or not "
                                       "at all), with progress on the terminal; default: standard output")
    predict.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    columns = predict.add_argument_group("the columns of a --file of examples")
    columns.add_argument("--text-column", help="the texts, or questions (default: text, sentence, ...)")
    columns.add_argument("--text-pair-column",
                         help="the second texts of pairs, or contexts (default: text_pair, sentence2, context, ...)")
    columns.add_argument("--id-column", help="ids to copy into each prediction (default: id, idx, ...)")
    add_base_argument(predict)
    predict.add_argument("--trust", action="store_true",
                         help="run a SavedModel whose ops are not all on kbert's list of safe ops (one that "
                              "can read or write files, reach the network or run programs): only for a "
                              "model whose source you trust")
    predict.add_argument("--time-limit", type=positive_float, default=300, metavar="SECONDS",
                         help="without --trust: the seconds that loading the model, and each batch of "
                              "texts, may take; past them the command ends (default 300)")
    predict.add_argument("--memory-limit", type=positive_float, default=8, metavar="GIB",
                         help="without --trust: the memory the command may hold, in GiB; past it the "
                              "command ends (default 8)")


def _export_folders(args):
    return [args.out, os.path.join(args.out, args.name)]


def _check_export(args):
    import re

    from kbert.runs.outputs import check_input_file, check_output_folder

    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.name) or args.name in (".", ".."):
        raise ValueError(f"--name {args.name!r} is not a model name: one folder name of letters, digits, '.', '_' "
                         "and '-' (not '.' or '..'), which goes under --out.")
    check_input_file(args.model, "MODEL")
    check_output_folder(args.out, "--out")


def _check_predict(args):
    from kbert.runs.outputs import check_input_file, check_output_file

    if args.file not in (None, "-"):
        check_input_file(args.file, "--file")
    if args.out is not None:
        check_output_file(args.out, "--out", args.overwrite, [args.saved_model, args.file])


def _export(args):
    from kbert.serving import export

    # Checked here, in the command's words (the library's message names its
    # `overwrite=True`); without --version the next free version is used.
    target = os.path.join(args.out, args.name, str(args.version))
    if args.version is not None and os.path.exists(target) and not args.overwrite:
        raise FileExistsError(f"{target} exists; choose another --version, or pass --overwrite "
                              "to replace it.")
    if args.overwrite and os.path.exists(target) and not os.path.isfile(os.path.join(target, "saved_model.pb")):
        raise ValueError(f"{target} is not an exported model (no saved_model.pb), so --overwrite does not "
                         "replace it; choose another --version.")
    model = load_task_model(args.model, args.base)
    text_pairs = {"pairs": True, "single": False, None: None}[args.texts]
    try:
        # kbert.export checks the ops before the version goes live.
        path = export(model, os.path.join(args.out, args.name), version=args.version,
                      overwrite=args.overwrite, text_pairs=text_pairs)
    except ValueError as error:
        if text_pairs is None and "text_pairs" in str(error):
            raise ValueError(f"{args.model} has not seen any text yet, so it is not known whether "
                             "it reads single texts or pairs; pass --texts single or --texts "
                             "pairs.") from None
        raise
    print(f"Exported {type(model).__name__} to {path} (signatures serving_default, from_token_ids, "
          "from_tf_example; every op is one TF Serving has)")


def _predict(args):
    import contextlib

    from kbert.serving.run_limits import RunLimits

    # The op check keeps an untrusted model from files and the network, not
    # from the CPU and memory (a loop that never ends is made of safe ops):
    # loading and each batch get a time limit, the process a memory limit.
    limits = contextlib.nullcontext() if args.trust else RunLimits(
        args.time_limit, args.memory_limit * 2**30, lambda limit: _past_limit(args, limit))
    example_file = args.file not in (None, "-") and os.path.splitext(args.file)[1].lower() in EXAMPLE_FILES
    texts = None if example_file else _texts(args)  # standard input is read before the model loads
    with limits:
        predictor = _predictor(args)
        batches = _file_batches(args, predictor) if example_file else _text_batches(texts, predictor)
        if args.out is None:
            _write_predictions(predictor, batches, sys.stdout, limits, args.trust)
            return
        from kbert.io.atomic_files import write_atomically

        def write(path):
            with open(path, "w", encoding="utf-8") as file:
                count = _write_predictions(predictor, batches, file, limits, args.trust, progress=True)
            print(f"Wrote {count:,} predictions to {args.out}")

        write_atomically(args.out, write)


def _predictor(args):
    from kbert.models.adapter_file import is_adapter_file
    from kbert.serving import SavedModelPredictor

    path = args.saved_model
    if os.path.isfile(path) and (path.endswith(".keras") or is_adapter_file(path)):
        return SavedModelPredictor.from_keras_model(load_task_model(path, args.base), path)
    check_no_base(path, args.base)
    return SavedModelPredictor(path, trust=args.trust)


# The --file extensions read as files of examples with columns; any other file holds a text a line.
EXAMPLE_FILES = (".csv", ".tsv", ".jsonl", ".ndjson")
# A model's inputs, by the roles of a file's columns (`kbert.data.read_labelled_file`).
_INPUT_ROLES = {"text": "text", "text_pair": "text_pair", "question": "text", "context": "text_pair"}


def _texts(args):
    """The texts given as arguments, then those of a --file that holds a text a line."""
    if args.file is not None and args.texts and os.path.splitext(args.file)[1].lower() in EXAMPLE_FILES:
        raise ValueError("Give texts as arguments or a --file of examples, not both.")
    texts = [_argument_bytes(text) for text in args.texts]
    if args.file is not None:
        texts += _read_lines(args.file)
    if not texts:
        raise ValueError("Give texts as arguments or with --file.")
    return texts


def _text_batches(texts, predictor):
    """Yields `(None, {input: values})` batches of `PREDICT_BATCH_SIZE` examples of a flat list of texts."""
    if len(texts) % predictor.texts_per_example:
        predictor.predict_texts(texts)  # refused in one line that says what the model takes
    size = predictor.texts_per_example * PREDICT_BATCH_SIZE
    for start in range(0, len(texts), size):
        yield None, predictor.columns_of(texts[start : start + size])


def _file_batches(args, predictor):
    """Yields `(ids, {input: values})` batches of `PREDICT_BATCH_SIZE` examples of a file, streaming."""
    from kbert.data.labelled_file import iter_labelled_records

    if args.texts:
        raise ValueError("Give texts as arguments or a --file of examples, not both.")
    choices = "choices" in predictor.inputs  # multiple choice: a context and a list of choices a record
    roles = {"context": "text", "choices": "text_pair"} if choices else _INPUT_ROLES
    records = iter_labelled_records(args.file, text_column=args.text_column, text_pair_column=args.text_pair_column,
                                    id_column=args.id_column, require_labels=False, choices=choices)
    wanted = [roles[name] for name in predictor.inputs]
    ids, columns = [], {name: [] for name in predictor.inputs}
    for line_number, values in records:
        if line_number == records.first_line_number:
            _check_columns(args, predictor, records.roles, wanted)
        ids.append(values.get("id", str(line_number)))
        for name, role in zip(predictor.inputs, wanted):
            columns[name].append(values[role])
        if len(ids) == PREDICT_BATCH_SIZE:
            yield ids, columns
            ids, columns = [], {name: [] for name in predictor.inputs}
    if ids:
        yield ids, columns


def _check_columns(args, predictor, roles, wanted):
    """A file's columns must be the model's inputs: a pair column for a pair model, and only for one."""
    names = {"text": "--text-column", "text_pair": "--text-pair-column"}
    missing = [role for role in wanted if role not in roles]
    if missing:
        raise ValueError(f"{args.file}: {args.saved_model} takes {' and '.join(predictor.inputs)}, and no column "
                         f"is the {missing[0].replace('_', ' ')} by its name; name it with {names[missing[0]]}.")
    if "text_pair" in roles and "text_pair" not in wanted:
        raise ValueError(f"{args.file} has pairs (its column {roles['text_pair']!r}), but {args.saved_model} reads "
                         "single texts.")


def _write_predictions(predictor, batches, file, limits, trusted, progress=False):
    """Writes one JSON line per example (its id first, then the outputs by name); returns how many."""
    import json

    bar = None
    if progress:
        from kbert.io.progress_bar import progress_bar

        bar = progress_bar(None, unit_name="example")
    count = 0
    for ids, columns in batches:
        if not trusted:
            limits.restart()
        for index, example in enumerate(predictor.predict(columns)):
            row = {"id": ids[index]} if ids is not None else {}
            row.update(sorted(example.items()))
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
        count += len(next(iter(columns.values())))
        file.flush()
        if bar is not None:
            bar.update(count)
    return count


def _past_limit(args, limit):
    flag, amount = {"time": ("--time-limit", f"{args.time_limit:g} s"),
                    "memory": ("--memory-limit", f"{args.memory_limit:g} GiB")}[limit]
    return (f"kbert predict: error: {args.saved_model} ran past {flag} ({amount}) and was stopped; an untrusted "
            f"model can loop or grow without end. Raise {flag}, or pass --trust only for a model whose source "
            "you trust.")


def _argument_bytes(text):
    """A command-line argument as the bytes that were typed.

    Python decodes arguments as UTF-8, keeping undecodable bytes as lone
    surrogates; `os.fsencode` gives those bytes back, so a model gets what
    it would get from any other client.
    """
    return os.fsencode(text)


def _read_lines(path):
    """The lines of a file or of standard input (`-`), as bytes, without their line ends.

    Lines end as in every text file kbert reads (LF, CRLF or CR; a leading
    byte-order mark removed: `kbert.io.text_files`), but the bytes are sent as
    they are: a model server takes whatever a client sends.
    """
    import re

    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        with open(path, "rb") as file:
            data = file.read()
    lines = re.split(rb"\r\n|\r|\n", data.removeprefix(b"\xef\xbb\xbf"))
    if lines[-1] == b"":  # after the last line's end, or an empty file
        lines.pop()
    return lines
