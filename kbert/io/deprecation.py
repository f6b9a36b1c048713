"""Old names kept for one release: each use warns, naming the new one."""

import warnings


def deprecated_names(module, renamed):
    """A module `__getattr__` (PEP 562) that gives each old name's new value, with a `DeprecationWarning`.

    `renamed` maps an old name to `(new name, value)`.

    Example:
    >>> import warnings
    >>> lookup = deprecated_names("kbert.example", {"Old": ("New", 42)})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = lookup("Old")
    >>> value, str(caught[0].message)
    (42, '`kbert.example.Old` is deprecated: use `New`; the old name goes in the next release.')
    """

    def lookup(name):
        if name not in renamed:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new_name, value = renamed[name]
        warn_renamed(f"{module}.{name}", new_name)
        return value

    return lookup


def warn_renamed(old, new, stacklevel=2):
    """A `DeprecationWarning` that `old` is now `new` (both as a user writes them), for the caller's caller."""
    warnings.warn(f"`{old}` is deprecated: use `{new}`; the old name goes in the next release.", DeprecationWarning,
                  stacklevel=stacklevel + 1)
