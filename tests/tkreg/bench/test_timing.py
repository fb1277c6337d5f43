"""tkreg.bench.timing without a GPU: how many input sets a row rotates through."""
from __future__ import annotations

import pytest

from tkreg.bench.timing import L2_BYTES, rotations


@pytest.mark.parametrize("nbytes", [1, 2**20, 30 * 2**20, L2_BYTES, 2 * L2_BYTES, 134 * 2**20, 2**30])
def test_no_set_is_reused_while_l2_may_still_hold_it(nbytes):
    """At least two distinct sets, and twice L2's bytes between two uses of one set (up to the cap
    of 8): one set reused call after call left part of itself cached (docs/bench-method.md)."""
    sets = rotations(object, nbytes)
    assert 2 <= len(sets) <= 8
    assert len({id(s) for s in sets}) == len(sets)
    assert len(sets) == 8 or (len(sets) - 1) * nbytes >= 2 * L2_BYTES
