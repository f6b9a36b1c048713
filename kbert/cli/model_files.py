"""The task model a command reads: a `.keras` file, or a LoRA adapter file on the encoder it was trained on."""


def add_base_argument(command):
    command.add_argument("--base", metavar="ENCODER",
                         help="for a LoRA adapter file (the model.adapter of `kbert train --lora-rank`): the "
                              "encoder it was trained on, as --encoder names it (default: the checkpoint the "
                              "file names, where it is one kbert knows by name)")


def load_task_model(path, base=None):
    """The model of `path`: a LoRA adapter file (`kbert.load_adapter`) on `base`, or a `.keras` file."""
    from kbert.models.adapter_file import is_adapter_file

    if is_adapter_file(path):
        from kbert.checkpoints.adapter_loading import load_adapter

        return load_adapter(path, base=base)
    check_no_base(path, base)
    from kbert.saving import load_model

    return load_model(path)


def check_no_base(path, base):
    """Refuses `--base` for `path`, a model that is not a LoRA adapter file."""
    if base is not None:
        raise ValueError(f"--base is for a LoRA adapter file (the model.adapter of `kbert train --lora-rank`); "
                         f"{path} is not one.")
