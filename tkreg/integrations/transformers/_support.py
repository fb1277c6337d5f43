"""What the transformers adapters share: the reason a module stays on torch."""
from __future__ import annotations


class Unsupported(Exception):
    """A module tkreg does not serve; str(e) is the one-line reason kernelize's report shows
    (e.g. "head dim 96: tkreg attention serves 64 and 128")."""
