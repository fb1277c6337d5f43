"""Every environment switch tkreg reads, in one place (shown by `tkreg doctor`)."""
from __future__ import annotations

import os

SWITCHES = {
    "TKREG_FALLBACK": "`reference`: run the torch reference where no kernel pack serves the GPU",
    "TKREG_PLUGINS": "comma-separated allow-list of plugin entry-point names to load",
    "TKREG_DISABLE_PLUGINS": "`1`: load no plugin packs",
    "TKREG_PACKS": "extra pack folders to load, separated by `:` (like tkreg.register_pack)",
    "TKREG_DISABLE_SHIM": "`1`: read tensors through their Python attributes, not torch's C shim (slower)",
    "TKREG_CHECK_PAGES": "`1`: paged_decode_attention checks seq_lens and the block table's used entries "
                         "on the GPU before each launch (one sync per call; read at import)",
}


def fallback_reference() -> bool:
    v = os.environ.get("TKREG_FALLBACK", "").strip().lower()
    if v not in ("", "reference", "none", "0"):
        raise ValueError(f"TKREG_FALLBACK={v!r}: expected `reference` or unset")
    return v == "reference"


def plugins_disabled() -> bool:
    return os.environ.get("TKREG_DISABLE_PLUGINS", "").strip() not in ("", "0")


def plugin_allow_list() -> set | None:
    v = os.environ.get("TKREG_PLUGINS")
    return None if v is None else {p.strip() for p in v.split(",") if p.strip()}


def shim_disabled() -> bool:
    return os.environ.get("TKREG_DISABLE_SHIM", "").strip() not in ("", "0")


def check_pages() -> bool:
    return os.environ.get("TKREG_CHECK_PAGES", "").strip() not in ("", "0")


def extra_packs() -> list[str]:
    return [p for p in os.environ.get("TKREG_PACKS", "").split(":") if p]


def in_force() -> dict:
    return {k: os.environ[k] for k in SWITCHES if k in os.environ}
