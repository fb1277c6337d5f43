"""What the MoE routing modules share: the largest E and k the kernels serve, the CTA size of the
token-moving kernels, the prefix of the references."""
from tkreg.reference.moe import MAX_EXPERTS, MAX_K  # noqa: F401  (gate lanes, histograms; per-token registers)

MOVE_THREADS = 128      # expand and combine CTAs (a CTA a token)
MOVE_RULE = f"K <= {MAX_K}"
REFERENCE = "tkreg.reference.moe:"
