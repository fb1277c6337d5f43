"""The rotation both rotary kernels apply (embedding.py, qk_norm_rope_cache.py): a thread's two
8-element vectors (a, b) of each of its heads, rotated by the cos/sin of one cache row."""


def rotation(T, D: int, dtype: str, heads: int):
    """(parts, rotate) for a thread's `heads` heads of D elements of `dtype`:
    parts(neox, s): offsets within a head of slot s's two 8-element vectors (a, b);
    rotate(cache, P, p, s, xa, xb, cs, sn, neox): a macro loading the 8 cos and 8 sin of slot s at
    row p (clamped to [0, P - 1]) into cs, sn and rotating xa, xb [heads, 8] in place."""
    H = D // 2                     # half the head
    f32 = "float32"

    def parts(neox: bool, s):
        return (s * 8, H + s * 8) if neox else (s * 16, s * 16 + 8)

    @T.macro
    def rot(a, ia, b, ib, cs, sn, i):
        """(x1, x2) = (a[ia], b[ib]) <- (x1*c - x2*s, x2*c + x1*s), c/s = pair i; fp32, one rounding."""
        x1 = T.cast(a[ia], f32)
        x2 = T.cast(b[ib], f32)
        c = T.cast(cs[i], f32)
        s = T.cast(sn[i], f32)
        a[ia] = T.cast(T.ieee_sub(T.ieee_mul(x1, c), T.ieee_mul(x2, s)), dtype)
        b[ib] = T.cast(T.ieee_add(T.ieee_mul(x2, c), T.ieee_mul(x1, s)), dtype)

    @T.macro
    def rotate(cache, P, p, s, xa, xb, cs, sn, neox: bool):
        pos = T.alloc_var("int32")
        pos = T.cast(T.max(T.min(p, T.cast(P - 1, "int64")), T.int64(0)), "int32")
        for e in T.vectorized(8):
            cs[e] = cache[pos, s * 8 + e]
        for e in T.vectorized(8):
            sn[e] = cache[pos, H + s * 8 + e]
        for j in T.unroll(heads):
            if neox:
                for e in T.unroll(8):
                    rot(xa, (j, e), xb, (j, e), cs, sn, e)
            else:
                for e in T.unroll(4):
                    rot(xa, (j, 2 * e), xa, (j, 2 * e + 1), cs, sn, e)
                for e in T.unroll(4):
                    rot(xb, (j, 2 * e), xb, (j, 2 * e + 1), cs, sn, 4 + e)

    return parts, rotate
