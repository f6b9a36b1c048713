"""Deprecated in kbert 0.5: `kbert.models.transformer_block`, where `LeanTransformerEncoder` is now `TransformerBlock`."""

from kbert.models.transformer_block import KERAS_HUB_BLOCK_ATTRIBUTES, TransformerBlock  # noqa: F401
from kbert.io.deprecation import deprecated_names

__getattr__ = deprecated_names(__name__, {"LeanTransformerEncoder": ("TransformerBlock", TransformerBlock)})
