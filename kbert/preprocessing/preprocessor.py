"""Deprecated in kbert 0.5: `kbert.preprocessing.text_packer`, where `Preprocessor` is now `TextPacker`."""

from kbert.preprocessing.text_packer import TRUNCATIONS, TextPacker, split_segments  # noqa: F401
from kbert.io.deprecation import deprecated_names

__getattr__ = deprecated_names(__name__, {"Preprocessor": ("TextPacker", TextPacker)})
