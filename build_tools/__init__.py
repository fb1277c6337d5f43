"""Build-time tools: compile TileLang kernel specs into kernel packs (needs tilelang + nvcc)."""
