"""Plugins without a GPU or tilelang: small fake plugin packages on sys.path (a `.dist-info` with
an `entry_points.txt`, a module naming a pack cut from the built-in one), loaded by a fresh
Registry.  Each broken case gives one warning and leaves the built-ins (and other plugins)
working; the switches and the name-conflict rules hold.  The real example plugin, built and
installed into a fresh venv, is tests/plugins/test_example_plugin.py."""
from __future__ import annotations

import hashlib
import json
import shutil
import uuid
import warnings
from pathlib import Path

import pytest
import torch

import tkreg
from tkreg import cli, manifest, reference, runtime
from tkreg.errors import NoKernelError, UnsupportedDeviceError
from tkreg.registry import BUILTIN_PACKS, Registry

BF16 = torch.bfloat16
ARCHS = ("sm_90a", "sm_100a")


# ---- fake plugins ----------------------------------------------------------------------------
def make_pack(root: Path, ops: dict, archs=ARCHS, priority=None) -> Path:
    """A pack at `root` whose ops are copies of the built-in tkreg.gemm (cubins included):
    `ops` maps each new op name to spec changes, e.g. {"fake.mm": {"reference": "m:f"}}."""
    for arch in archs:
        src = json.loads((BUILTIN_PACKS / arch / manifest.FILENAME).read_text())
        gemm = src["ops"]["tkreg.gemm"]
        d = root / arch
        d.mkdir(parents=True)
        out = {}
        for name, changes in ops.items():
            spec = {**gemm["spec"], "name": name, **changes}
            if priority is not None:
                spec["variants"] = [dict(v, priority=priority) for v in spec["variants"]]
            for v in gemm["variants"]:
                shutil.copy(BUILTIN_PACKS / arch / v["cubin"], d / v["cubin"])
            out[name] = {"spec": spec, "variants": gemm["variants"]}
        manifest.dump_json(d / manifest.FILENAME, {**src, "namespace": "", "ops": out})
    return root


class Site:
    """A folder on sys.path where fake plugin distributions are installed."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()

    def plugin(self, ep: str, pack: Path | None = None, *, body: str | None = None,
               attr: str = "PACK", dist: str | None = None) -> str:
        """Install distribution `dist` (default fake-<ep>) with entry point `ep = module:attr`."""
        dist = dist or f"fake-{ep}"
        mod = f"tkfake_{ep}_{uuid.uuid4().hex[:8]}"
        (self.root / f"{mod}.py").write_text(body if body is not None else f"PACK = {str(pack)!r}\n")
        info = self.root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[tkreg.kernels]\n{ep} = {mod}{':' + attr if attr else ''}\n")
        return mod


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.delenv("TKREG_PLUGINS", raising=False)
    monkeypatch.delenv("TKREG_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("TKREG_PACKS", raising=False)
    s = Site(tmp_path / "site")
    monkeypatch.syspath_prepend(str(s.root))
    return s


def ref_module(site: Site, tag: float) -> str:
    """A module whose `ref(a, b)` returns a tensor of `tag`: tells which plugin's op ran."""
    mod = f"tkfake_ref_{uuid.uuid4().hex[:8]}"
    (site.root / f"{mod}.py").write_text(
        f"import torch\n\ndef ref(a, b, bias=None):\n    return torch.full((a.shape[0], b.shape[0]), {tag})\n")
    return f"{mod}:ref"


def load(monkeypatch=None) -> tuple[Registry, list[str]]:
    """A fresh registry, loaded; the tkreg warnings it gave. With monkeypatch, it becomes the
    registry `tkreg.call`, `tkreg.list_ops` and the CLI use, for this test."""
    r = Registry()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r.ensure()
    if monkeypatch is not None:
        monkeypatch.setattr(runtime.RUNTIME, "registry", r)
        runtime.RUNTIME.reset()  # and again at teardown (_fresh_ops)
    return r, [str(x.message) for x in w if str(x.message).startswith("tkreg:")]


@pytest.fixture(autouse=True)
def _fresh_ops():
    yield
    runtime.RUNTIME.reset()   # the op caches may hold ops of a test's registry


def mine(msgs, *names):
    return [m for m in msgs if any(n in m for n in names)]


def builtins_work(r: Registry, monkeypatch):
    e = r.entry("tkreg.gemm")
    assert e.owner == "tkreg (built-in)"
    assert {c.source for a in e.archs() for c in e.candidates(a)} == {"tkreg (built-in)"}
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    a, b = torch.randn(3, 64, dtype=BF16), torch.randn(5, 64, dtype=BF16)
    torch.testing.assert_close(tkreg.call("tkreg.gemm", a, b), reference.gemm(a, b))


# ---- a good plugin, each way an entry point may name its pack ---------------------------------
@pytest.mark.parametrize("form", ["path", "callable", "module"])
def test_plugin_loads_under_its_entry_point_name(site, tmp_path, monkeypatch, form):
    pack = make_pack(tmp_path / "pk", {"fake.mm": {"reference": "tkreg.reference.gemm:gemm"}})
    if form == "path":
        site.plugin("alpha", pack)
    elif form == "callable":
        site.plugin("alpha", body=f"def pack():\n    return {str(pack)!r}\n", attr="pack")
    else:
        pkg = site.root / f"tkfake_pkg_{uuid.uuid4().hex[:8]}"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        shutil.copytree(pack, pkg / "packs")
        info = site.root / "fake_alpha-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-alpha\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[tkreg.kernels]\nalpha = {pkg.name}\n")
    r, msgs = load(monkeypatch)
    assert mine(msgs, "alpha") == []
    e = r.entry("fake.mm")
    assert e.owner == "plugin:alpha" and e.archs() == ["sm_100a", "sm_90a"]
    src = next(s for s in r.sources if s.plugin == "alpha")
    assert src.state == "loaded" and src.dist == "fake-alpha 1.0" and src.ops == ["fake.mm"]
    assert r.entry("alpha:fake.mm").archs() == e.archs()
    ops = {o["op"]: o for o in tkreg.list_ops()}
    assert ops["fake.mm"]["owner"] == "plugin:alpha" and "alpha:fake.mm" not in ops
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    a, b = torch.randn(3, 64, dtype=BF16), torch.randn(5, 64, dtype=BF16)
    torch.testing.assert_close(tkreg.call("fake.mm", a, b), reference.gemm(a, b))
    torch.testing.assert_close(tkreg.call("alpha:fake.mm", a, b), reference.gemm(a, b))
    assert "swap_ab=true" in tkreg.explain("alpha:fake.mm", a, b, arch="sm_90a").chosen  # the decode class


def test_plugins_load_lazily_once(site, tmp_path, monkeypatch):
    site.plugin("alpha", body="raise ImportError('boom')\n")
    r = Registry()
    assert r.sources == []           # nothing read before first use
    with pytest.warns(RuntimeWarning, match="alpha"):
        r.entry("tkreg.gemm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.entry("tkreg.gemm")        # loaded once: no second warning
    assert sum(s.plugin == "alpha" for s in r.sources) == 1


# ---- isolation: each broken plugin gives one warning, the rest keep working ------------------
def _flip(p: Path):
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def _edit_manifest(pack: Path, arch: str, fn):
    f = pack / arch / manifest.FILENAME
    f.write_text(fn(f.read_text()))


def _first_cubin(pack: Path, arch="sm_90a") -> Path:
    m = json.loads((pack / arch / manifest.FILENAME).read_text())
    return pack / arch / next(iter(m["ops"].values()))["variants"][0]["cubin"]


def _wrong_arch(pack: Path):
    """An sm_100a cubin in the sm_90a folder, its sha256 updated: only the ELF check sees it."""
    f = pack / "sm_90a" / manifest.FILENAME
    m = json.loads(f.read_text())
    v = m["ops"]["bad.mm"]["variants"][0]
    m100 = json.loads((pack / "sm_100a" / manifest.FILENAME).read_text())
    data = (pack / "sm_100a" / m100["ops"]["bad.mm"]["variants"][0]["cubin"]).read_bytes()
    (pack / "sm_90a" / v["cubin"]).write_bytes(data)
    v["sha256"] = hashlib.sha256(data).hexdigest()
    manifest.dump_json(f, m)


def _bad_plan(pack: Path):
    f = pack / "sm_90a" / manifest.FILENAME
    m = json.loads(f.read_text())
    m["ops"]["bad.mm"]["variants"][0]["plan"]["kernels"] = "nope"
    manifest.dump_json(f, m)


def _module_without_pack(site):
    pkg = site.root / f"tkfake_nopack_{uuid.uuid4().hex[:8]}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    return pkg.name


BROKEN = {
    "import fails": (None, "ImportError: boom"),
    "module missing": ("missing", "ModuleNotFoundError"),
    "not a pack path": ("int", "gave int"),
    "no manifest": ("empty", "no <arch>/manifest.json"),
    "module without packs/": ("nopack", "/packs/<arch>/manifest.json"),
    "malformed manifest": (lambda p: _edit_manifest(p, "sm_90a", lambda t: "{not json"), "corrupt manifest"),
    "schema too new": (lambda p: _edit_manifest(p, "sm_100a", lambda t: json.dumps({**json.loads(t), "schema": 99})),
                       "newer than this tkreg reads"),
    "bad spec": (lambda p: _edit_manifest(p, "sm_90a", lambda t: t.replace('"role": "output"', '"role": "sideways"')),
                 "bad spec"),
    "dtype_of cycle": (lambda p: _edit_manifest(p, "sm_90a", lambda t: t.replace('"dtype_of": "a"', '"dtype_of": "b"')),
                       "dtype_of forms a cycle"),
    "missing cubin": (lambda p: _first_cubin(p).unlink(), "is missing"),
    "corrupt cubin": (lambda p: _flip(_first_cubin(p, "sm_100a")), "sha256"),
    "cubin of another arch": (_wrong_arch, "expected sm_90a"),
    "malformed plan": (_bad_plan, "plan"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_plugin_is_skipped_with_one_warning(site, tmp_path, monkeypatch, capsys, case):
    how, msg = BROKEN[case]
    site.plugin("good", make_pack(tmp_path / "good", {"good.mm": {}}))
    pack = make_pack(tmp_path / "bad", {"bad.mm": {}, "bad.other": {}})
    if how is None:
        site.plugin("bad", body="raise ImportError('boom')\n")
    elif how == "missing":
        info = site.root / "fake_bad-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-bad\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[tkreg.kernels]\nbad = tkfake_no_such_module\n")
    elif how == "int":
        site.plugin("bad", body="PACK = 42\n")
    elif how == "empty":
        (tmp_path / "empty").mkdir()
        site.plugin("bad", tmp_path / "empty")
    elif how == "nopack":
        mod = _module_without_pack(site)
        info = site.root / "fake_bad-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-bad\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[tkreg.kernels]\nbad = {mod}\n")
    else:
        how(pack)
        site.plugin("bad", pack)
    r, msgs = load(monkeypatch)
    bad = mine(msgs, "plugin:bad")
    assert len(bad) == 1 and msg in bad[0] and "skipped" in bad[0], msgs
    assert "fake-bad 1.0" in bad[0]
    assert "bad.mm" not in r.entries and "bad.other" not in r.entries
    assert r.entry("good.mm").owner == "plugin:good"       # other plugins load
    builtins_work(r, monkeypatch)                           # built-ins run
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "plugin:bad" in out and "skipped: " in out and msg in out
    assert "plugin:good (fake-good 1.0): loaded" in out
    # A call to its op: the plugin and the reason first where a manifest of it could be read
    # enough to list its ops; else every registered op and the skipped packs.
    with pytest.raises(NoKernelError) as info:
        tkreg.call("bad.mm")
    text, state = str(info.value), next(s.state for s in r.sources if s.plugin == "bad")
    if how is None or isinstance(how, str):
        assert text.startswith("unknown op 'bad.mm'; registered ops: ") and "good.mm" in text, text
        assert text.endswith(f"Skipped packs (one may have held it):\n  plugin:bad (fake-bad 1.0): {state}"), text
    else:
        assert text.startswith(f"op 'bad.mm' is in a pack tkreg skipped:\n  plugin:bad (fake-bad 1.0): {state} "
                               f"[{pack}]\n"), text
    assert msg in text
    with pytest.raises(NoKernelError, match=r"^op 'bad:bad\.other' is in a pack tkreg skipped:\n  plugin:bad "):
        tkreg.call("bad:bad.other")   # qualified by the skipped plugin: named whatever it lists


def test_no_pack_for_this_arch_fails_at_the_call_naming_the_op(site, tmp_path, monkeypatch, capsys):
    site.plugin("alpha", make_pack(tmp_path / "pk", {"fake.mm": {}}, archs=("sm_90a",)))
    r, msgs = load(monkeypatch)
    assert mine(msgs, "alpha") == []
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    monkeypatch.setattr(runtime.RUNTIME, "arch_of", lambda dev: "sm_100a")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (10, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev=None: type("P", (), {"multi_processor_count": 148}))
    with pytest.raises(UnsupportedDeviceError, match=r"fake\.mm: cuda:0 .*sm_100a.*\['sm_90a'\]"):
        runtime.RUNTIME.resolve(r.entry("fake.mm"), 0)
    assert runtime.RUNTIME.resolve(r.entry("tkreg.gemm"), 0)   # built-ins still serve this GPU
    monkeypatch.setattr("tkreg.driver_api.driver_info", lambda: (13000, [(10, 0)]))
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "plugin:alpha (fake-alpha 1.0): loaded; archs sm_90a; 1 op(s)" in out
    assert "cuda:0: compute capability 10.0 -> served by pack sm_100a; not by plugin:alpha" in out


# ---- switches ----------------------------------------------------------------------------------
def test_allow_list_loads_only_the_named(site, tmp_path, monkeypatch, capsys):
    site.plugin("alpha", make_pack(tmp_path / "a", {"alpha.mm": {}}))
    site.plugin("beta", make_pack(tmp_path / "b", {"beta.mm": {}}))
    site.plugin("broken", body="raise ImportError('boom')\n")
    monkeypatch.setenv("TKREG_PLUGINS", "beta")
    r, msgs = load(monkeypatch)
    assert mine(msgs, "alpha", "beta", "broken") == []     # the broken one is not even imported
    assert "beta.mm" in r.entries and "alpha.mm" not in r.entries
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "allow-list TKREG_PLUGINS=beta" in out
    assert "alpha = " in out and "not loaded: not in TKREG_PLUGINS" in out

    monkeypatch.setenv("TKREG_PLUGINS", "beta,gamma")
    r, msgs = load()
    assert len(mine(msgs, "gamma")) == 1 and "which no installed package provides" in mine(msgs, "gamma")[0]
    assert "beta.mm" in r.entries


def test_disable_switch_loads_no_plugin(site, tmp_path, monkeypatch, capsys):
    site.plugin("alpha", make_pack(tmp_path / "a", {"alpha.mm": {}}))
    site.plugin("broken", body="raise ImportError('boom')\n")
    monkeypatch.setenv("TKREG_DISABLE_PLUGINS", "1")
    monkeypatch.setenv("TKREG_PLUGINS", "alpha")            # disable wins over the allow-list
    r, msgs = load(monkeypatch)
    assert msgs == [] and not any(s.plugin for s in r.sources)
    assert "alpha.mm" not in r.entries
    builtins_work(r, monkeypatch)
    assert cli.main(["doctor"]) == 0
    assert "disabled by TKREG_DISABLE_PLUGINS" in capsys.readouterr().out


# ---- conflicts ---------------------------------------------------------------------------------
def test_two_plugins_one_name_both_reachable(site, tmp_path, monkeypatch):
    site.plugin("beta", make_pack(tmp_path / "b", {"shared.mm": {"reference": ref_module(site, 2.0)},
                                                   "beta.mm": {}}))
    site.plugin("alpha", make_pack(tmp_path / "a", {"shared.mm": {"reference": ref_module(site, 1.0)}}))
    r, msgs = load(monkeypatch)
    (w,) = mine(msgs, "shared.mm")
    assert "`alpha`" in w and "`beta`" in w and "beta:shared.mm" in w and "alpha:shared.mm" in w
    assert r.entry("shared.mm").owner == "plugin:alpha"     # first by entry-point name
    assert "beta.mm" in r.entries                           # the conflict drops no other op
    monkeypatch.setenv("TKREG_FALLBACK", "reference")
    a, b = torch.randn(3, 64, dtype=BF16), torch.randn(5, 64, dtype=BF16)
    assert tkreg.call("shared.mm", a, b).unique().tolist() == [1.0]
    assert tkreg.call("alpha:shared.mm", a, b).unique().tolist() == [1.0]
    assert tkreg.call("beta:shared.mm", a, b).unique().tolist() == [2.0]
    ops = {o["op"]: o for o in tkreg.list_ops()}
    assert ops["beta:shared.mm"]["owner"] == "plugin:beta" and "alpha:shared.mm" not in ops
    src = next(s for s in r.sources if s.plugin == "beta")
    assert src.ops == ["beta.mm"] and src.notes == [w[len("tkreg: "):]]


def test_plugin_never_replaces_a_builtin(site, tmp_path, monkeypatch):
    site.plugin("alpha", make_pack(tmp_path / "a", {"tkreg.gemm": {"reference": ref_module(site, 3.0)},
                                                    "tkreg.brand_new": {}, "alpha.mm": {}}))
    r, msgs = load(monkeypatch)
    (dup,) = mine(msgs, "tkreg.gemm")
    assert "also defines tkreg.gemm (owned by tkreg (built-in)) without extends=True" in dup
    assert "alpha:tkreg.gemm" in dup
    (new,) = mine(msgs, "tkreg.brand_new")
    assert "namespace without extends=True" in new
    assert "tkreg.brand_new" not in r.entries and "alpha.mm" in r.entries
    builtins_work(r, monkeypatch)
    a, b = torch.randn(3, 64, dtype=BF16), torch.randn(5, 64, dtype=BF16)
    assert tkreg.call("alpha:tkreg.gemm", a, b).unique().tolist() == [3.0]


def test_extends_adds_variants_and_priority_decides(site, tmp_path, monkeypatch):
    site.plugin("alpha", make_pack(tmp_path / "a", {"tkreg.gemm": {"extends": True}}, priority=100))
    r, msgs = load(monkeypatch)
    assert mine(msgs, "alpha") == []
    e = r.entry("tkreg.gemm")
    assert e.owner == "tkreg (built-in)"
    keys = [c.key for c in e.candidates("sm_90a")]
    theirs = [k for k in keys if k.startswith("alpha:")]
    assert len(theirs) == len(r.entry("alpha:tkreg.gemm").candidates("sm_90a")) == len(keys) // 2
    a, b = torch.empty(16, 256, dtype=BF16), torch.empty(512, 256, dtype=BF16)
    assert tkreg.explain("tkreg.gemm", a, b, arch="sm_90a").chosen.startswith("alpha:")
    assert next(s for s in r.sources if s.plugin == "alpha").ops == ["tkreg.gemm"]


def test_extends_with_another_signature_or_nothing_to_extend_adds_nothing(site, tmp_path, monkeypatch):
    gemm = manifest.load(BUILTIN_PACKS / "sm_90a" / manifest.FILENAME).raw_ops["tkreg.gemm"]["spec"]
    other = [dict(t, dtypes=["float16"]) if t.get("dtypes") else t for t in gemm["tensors"]]
    site.plugin("alpha", make_pack(tmp_path / "a", {"tkreg.gemm": {"extends": True, "tensors": other},
                                                    "alpha.none": {"extends": True}, "alpha.mm": {}}))
    r, msgs = load(monkeypatch)
    (sig,) = mine(msgs, "tkreg.gemm")
    assert "signature differs" in sig and "nothing added" in sig
    (none,) = mine(msgs, "alpha.none")
    assert "which no pack defines" in none
    builtins_work(r, monkeypatch)
    assert "alpha.mm" in r.entries and "alpha:alpha.none" in r.qualified


def test_two_distributions_one_entry_point_name(site, tmp_path, monkeypatch):
    site.plugin("alpha", make_pack(tmp_path / "a", {"one.mm": {}}), dist="first-dist")
    site.plugin("alpha", make_pack(tmp_path / "b", {"two.mm": {}}), dist="second-dist")
    r, msgs = load()
    (w,) = mine(msgs, "already taken")
    assert "entry-point name `alpha`" in w
    assert len([e for e in ("one.mm", "two.mm") if e in r.entries]) == 1


def test_unknown_qualified_name_lists_what_exists(site, tmp_path, monkeypatch):
    site.plugin("alpha", make_pack(tmp_path / "a", {"alpha.mm": {}}))
    load(monkeypatch)
    with pytest.raises(NoKernelError, match=r"unknown op 'beta:alpha\.mm'.*alpha:alpha\.mm"):
        tkreg.call("beta:alpha.mm")


def test_a_skipped_plugin_is_named_by_unknown_op_and_fails_verify(site, tmp_path, monkeypatch, capsys):
    """An op of a plugin that was skipped: the NoKernelError says which plugin and why, and
    `tkreg verify` exits 1 (0 with --allow-skipped)."""
    mod = _module_without_pack(site)
    info = site.root / "fake_gone-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-gone\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tkreg.kernels]\ngone = {mod}\n")
    load(monkeypatch)
    with pytest.raises(NoKernelError, match=r"(?s)unknown op 'gone\.mm'.*Skipped packs.*plugin:gone.*no pack"):
        tkreg.call("gone.mm")
    with pytest.raises(NoKernelError, match=r"(?s)^op 'gone:gone\.mm' is in a pack tkreg skipped:\n  "
                       r"plugin:gone \(fake-gone 1\.0\): skipped: .*no pack"):
        tkreg.call("gone:gone.mm")
    assert cli.main(["verify"]) == 1
    assert "FAIL plugin:gone (fake-gone 1.0): skipped" in capsys.readouterr().out
    assert cli.main(["verify", "--allow-skipped"]) == 0
