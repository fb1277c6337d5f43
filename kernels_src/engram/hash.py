"""engram_hash: the n-gram hash of DeepSeek-V4's engram, every size a run-time one.

For layer l, token t and prefix length p + 2 (p = 0 .. n - 2), h = XOR over i <= p + 1 of
ids[t, i] * mult[l, i] (int64, wrapping), and column c = p * E + j of the output is
floormod(h, vocab[l, p, j]) + offsets[l, c] in int32 (wrapping), as tkreg.reference.engram does.

One thread an output element, columns fastest: stores are coalesced and a token's ids are read by
its (n - 1) * E neighbouring threads from L1; each thread redoes the <= n multiply-XORs of its
prefix (n is 3 in V4), cheaper than exchanging them.
"""
from tkreg.spec import OpSpec, Tensor, Variant

THREADS = 256


def engram_hash_kernel(threads: int):
    import tilelang.language as T

    Tn, n, L, E = T.dynamic("T"), T.dynamic("n"), T.dynamic("L"), T.dynamic("E")
    C = (n - 1) * E                                  # output columns a (layer, token)
    i64 = "int64"

    @T.prim_func
    def engram_hash(ngram_ids: T.Tensor((Tn, n), "int32"), multipliers: T.Tensor((L, n), i64),
                    vocab_sizes: T.Tensor((L, n - 1, E), "int32"), offsets: T.Tensor((L, C), "int32"),
                    out: T.Tensor((L, Tn, C), "int32")):
        with T.Kernel(T.ceildiv(Tn * C, threads), L, threads=threads) as (bx, layer):
            tx = T.get_thread_binding()
            idx = bx * threads + tx
            if idx < Tn * C:                         # non-negative: truncating division, decoded once
                tok = T.alloc_var("int32")
                col = T.alloc_var("int32")
                p = T.alloc_var("int32")             # prefix of p + 2 ids
                tok = T.truncdiv(idx, C)
                col = idx - tok * C
                p = T.truncdiv(col, E)
                h = T.alloc_var(i64)
                h = T.int64(0)
                for i in T.serial(n):
                    if i <= p + 1:
                        h = T.bitwise_xor(h, T.cast(ngram_ids[tok, i], i64) * multipliers[layer, i])
                m = T.floormod(h, T.cast(vocab_sizes[layer, p, col - p * E], i64))
                out[layer, tok, col] = T.cast(m, "int32") + offsets[layer, col]

    return engram_hash


SPECS = (
    OpSpec(
        name="tkreg.engram_hash",
        doc="Engram n-gram hash: ngram_ids[T, n], multipliers[L, n], vocab_sizes[L, n-1, E], "
            "offsets[L, (n-1)*E] -> out[L, T, (n-1)*E] int32",
        tensors=(Tensor("ngram_ids", ("T", "n"), dtype="int32"),
                 Tensor("multipliers", ("L", "n"), dtype="int64"),
                 Tensor("vocab_sizes", ("L", "n - 1", "E"), dtype="int32"),
                 Tensor("offsets", ("L", "(n - 1) * E"), dtype="int32"),
                 Tensor("out", ("L", "T", "(n - 1) * E"), dtype="int32", role="output")),
        factory=engram_hash_kernel,
        variants=(Variant({"threads": THREADS}, rule="n >= 2 and E >= 1 and L >= 1"),),
        reference="tkreg.reference.engram:engram_hash",
    ),
)
