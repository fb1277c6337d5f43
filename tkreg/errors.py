"""Every error tkreg raises on purpose, so callers can catch them by name.

Messages name the op, the argument, what was expected and, where there is one, the fix.
"""


class TkregError(Exception):
    """Base class."""


class SpecError(TkregError, ValueError):
    """A kernel spec (or a rule/shape expression in it) is malformed."""


class PackError(TkregError):
    """A kernel pack cannot be used: missing or corrupt manifest or cubin, schema too new.

    `pack` is the pack's folder where the error is about a whole pack (`tkreg.register_pack`
    refusing one); the message names it too."""

    def __init__(self, msg: str, pack: str | None = None):
        super().__init__(msg)
        self.pack = pack


class NoKernelError(TkregError, ValueError):
    """No variant accepts these arguments; the message lists every candidate and why."""


class UnsupportedDeviceError(TkregError, RuntimeError):
    """The GPU's architecture has no pack; set TKREG_FALLBACK=reference to run the torch reference."""


class LaunchError(TkregError, RuntimeError):
    """The CUDA driver refused a call; the message carries op, variant and the driver's string."""
