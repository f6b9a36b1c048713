"""The error that names a setting: in Python by its keyword, in the `kbert` command by its flag."""


class SettingError(ValueError):
    """A setting's value that cannot work, its name (and any other's) written in backticks.

    The `kbert` command says each setting as its flag: a setting is the flag
    of its name, `batch_size` the command's `--batch-size`. `names` lists
    the settings the message names; a dict maps what the message writes in
    backticks to the flag's name where they differ (`lowercase=False` is
    the command's `--cased`).

    Example:
    >>> error = SettingError("`cased` needs a `vocabulary` file.", ["cased", "vocabulary"])
    >>> str(error)
    '`cased` needs a `vocabulary` file.'
    >>> error.said_as_flags()
    '--cased needs a --vocabulary file.'
    >>> SettingError("pass `lowercase=False`", {"lowercase=False": "cased"}).said_as_flags()
    'pass --cased'
    """

    def __init__(self, message, names):
        super().__init__(message)
        self.names = dict(names) if isinstance(names, dict) else {name: name for name in names}

    def said_as_flags(self):
        """The message with each setting named as the command's flag."""
        message = str(self)
        for written, flag in self.names.items():
            message = message.replace(f"`{written}`", "--" + flag.replace("_", "-"))
        return message


def said_as_flags(message, names):
    """`message` with each setting of `names` written in backticks said as the command's flag of its name.

    >>> said_as_flags("`batch_size` 8 reads 80 texts", ["batch_size"])
    '--batch-size 8 reads 80 texts'
    """
    return SettingError(message, names).said_as_flags()
