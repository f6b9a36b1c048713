"""Settings objects (frozen dataclasses) made from keyword arguments: what `from_arguments` does for each kind."""

import dataclasses


def settings_from_arguments(kind, settings, options, caller, kind_name=None):
    """`settings` (a `kind`), or the `kind` that the keyword `options` make; an option may repeat a setting, not change it.

    `caller` names the function whose keywords these are, in the error for
    an unknown one; `kind_name` the class as users know it (default its name).

    Example:
    >>> @dataclasses.dataclass(frozen=True)
    ... class Sizes:
    ...     width: int = 2
    >>> settings_from_arguments(Sizes, None, {"width": 3}, "f()").width
    3
    >>> settings_from_arguments(Sizes, Sizes(4), {"width": 5}, "f()")
    Traceback (most recent call last):
    ...
    ValueError: `width=5` conflicts with `settings.width=4`; give it in one place.
    """
    fields = {field.name for field in dataclasses.fields(kind)}
    for name in options:
        if name not in fields:
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}.")
    if settings is None:
        return kind(**options)
    if not isinstance(settings, kind):
        raise TypeError(f"`settings` must be a {kind_name or kind.__name__}, got {settings!r}.")
    for name, value in options.items():
        if getattr(settings, name) != value:
            raise ValueError(f"`{name}={value!r}` conflicts with `settings.{name}={getattr(settings, name)!r}`; "
                             "give it in one place.")
    return settings
