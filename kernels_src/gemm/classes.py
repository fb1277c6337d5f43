"""Shape-class rules shared by the GEMM ops.  A class is (name, tile params, rule, priority): the
rule (an expression of M, N, K and SM_COUNT, `tkreg.explain` shows it) picks the variant, the higher
priority is tried first, and the last class of a list has no rule.  The class name only names the
variant; the kernel ignores it."""

# Warp-specialized bf16 tile widths and their efficiency per tile (%, relative to 256; measured on
# the H200 where wave counts tie, docs/gemm-tuning.md).  A shape gets the width whose useful
# fraction of the issued waves, times that efficiency, is highest: useful / issued work is
# M N / (rounds * SM_COUNT * 128 * w) with rounds = ceil(tiles / SM_COUNT), so width w beats v when
# k_w * rounds_v * v >= k_v * rounds_w * w (e.g. N = 7168: 224-wide tiles at M = 512-2048, where 256
# leaves a quarter of the last wave idle).
WIDTHS = {256: 100, 224: 97, 128: 90, 112: 87}


def tile_count(bm: int, bn: int) -> str:
    """The number of bm x bn tiles of out[M, N]."""
    return f"((M + {bm - 1}) // {bm}) * ((N + {bn - 1}) // {bn})"


def fills(bm: int, bn: int) -> str:
    """Rule: a grid of bm x bn tiles covers at least 3/4 of the SMs."""
    return f"4 * {tile_count(bm, bn)} >= 3 * SM_COUNT"


def _rounds(bm: int, bn: int) -> str:
    return f"(({tile_count(bm, bn)} + SM_COUNT - 1) // SM_COUNT)"


def best_width(w: int, widths=tuple(WIDTHS)) -> str:
    """Rule: the 128-row warp-specialized tile of width w fills the SMs and has the best score of
    the `widths` (of WIDTHS) an op ships."""
    return " and ".join([fills(128, w)] + [f"{WIDTHS[w] * v} * {_rounds(128, v)} >= {WIDTHS[v] * w} * {_rounds(128, w)}"
                                           for v in widths if v != w])
