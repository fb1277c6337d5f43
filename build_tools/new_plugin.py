"""`python -m build_tools new-plugin NAME`: a complete plugin package to start from.

Writes build_tools/plugin_template/ with its placeholders filled: pyproject.toml (entry point,
scikit-build-core), CMakeLists.txt (`tkreg_add_pack`), the package (typed wrappers, kernels with
their OpSpecs, torch references) and its tests (CPU through the references, GPU through the
kernels and torch.compile).  tkreg's own example plugin (tests/plugins/tkreg_example) is this
output; a test keeps the two equal.
"""
from __future__ import annotations

import re
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "plugin_template"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def render(name: str, namespace: str | None = None, dist: str | None = None) -> dict:
    """{relative path: text} of a new plugin package."""
    namespace = namespace or name
    dist = dist or name.replace("_", "-")
    for what, v in (("package name", name), ("namespace", namespace)):
        if not _IDENT.fullmatch(v) or v == "tkreg":
            raise ValueError(f"{what} {v!r} must be a Python identifier other than `tkreg`")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", dist):
        raise ValueError(f"distribution name {dist!r} is not a valid project name")
    fill = {"@name@": name, "@ns@": namespace, "@dist@": dist}
    out = {}
    for f in sorted(TEMPLATE.rglob("*.tmpl")):
        rel, text = str(f.relative_to(TEMPLATE))[:-len(".tmpl")], f.read_text()
        for k, v in fill.items():
            rel, text = rel.replace(k, v), text.replace(k, v)
        out[rel] = text
    return out


def generate(name: str, namespace: str | None = None, dist: str | None = None, out: Path | None = None) -> Path:
    files = render(name, namespace, dist)
    root = Path(out) if out else Path(dist or name.replace("_", "-"))
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} exists and is not empty; pick another --out")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def main(args) -> int:
    root = generate(args.name, args.namespace, args.dist, args.out)
    print(f"wrote {root}/ ({len(render(args.name, args.namespace, args.dist))} files). Next:\n"
          f"  cd {root} && pip wheel --no-build-isolation --no-deps -w dist .\n"
          f"  pip install dist/*.whl && python -m pytest tests")
    return 0
