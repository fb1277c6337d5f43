"""Adapters that put tkreg's ops under other libraries' models.  Each one imports its library
only when used: `import tkreg` never imports transformers."""
