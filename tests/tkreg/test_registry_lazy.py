"""The built-in pack reads only the visible GPUs' archs when torch has initialised CUDA already,
and every path that needs the other archs reads them, once, to the state of a full load.  CPU
only: CUDA is faked by patching torch.cuda, and the registry's manifest reads are recorded."""
from __future__ import annotations

import json
import shutil
import sys
import threading
import warnings

import pytest
import torch

from tkreg import api, cli, manifest, registry, runtime, torch_library
from tkreg.errors import NoKernelError, UnsupportedDeviceError
from tkreg.registry import BUILTIN_PACKS, Registry, visible_archs
from tkreg.runtime import Runtime

BF16 = torch.bfloat16
FULL = ["sm_100a", "sm_90a"]   # a full load's arch order (sorted folders)


@pytest.fixture
def opened(monkeypatch):
    """The arch folders of the built-in pack whose manifest the registry read, in order (other
    packs, and other readers such as `tkreg verify`'s own checks, are not counted)."""
    seen, load = [], manifest.load

    def record(path):
        if sys._getframe(1).f_globals["__name__"] == "tkreg.registry" and path.parent.parent == registry.BUILTIN_PACKS:
            seen.append(path.parent.name)
        return load(path)
    monkeypatch.setattr(manifest, "load", record)
    monkeypatch.setenv("TKREG_DISABLE_PLUGINS", "1")
    monkeypatch.delenv("TKREG_PACKS", raising=False)
    monkeypatch.delenv("TKREG_FALLBACK", raising=False)
    return seen


def fake_cuda(monkeypatch, *caps, initialized=True):
    """torch.cuda as a process that already used GPUs of these capabilities would see it."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: caps[dev or 0])


def state(r: Registry):
    """What a registry ended up with: per op its owner, archs in order, candidates per arch,
    the first row's source; per pack its state, archs, ops and notes."""
    ops = {n: (e.owner, list(e.sources), {a: [c.key for c in e.candidates(a)] for a in e.sources},
               [rows[0][3] for rows in e.sources.values()], e.spec.to_json())
           for n, e in sorted(r.entries.items())}
    qual = {n: {a: [c.key for c in e.candidates(a)] for a in e.sources} for n, e in sorted(r.qualified.items())}
    packs = [(s.name, s.state, s.archs, sorted(s.ops), s.notes) for s in r.sources]
    return ops, qual, packs


@pytest.fixture(scope="module")
def full_state():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "visible_archs", lambda: None)
        mp.setenv("TKREG_DISABLE_PLUGINS", "1")
        mp.delenv("TKREG_PACKS", raising=False)
        return state(Registry().ensure())


def test_detector_never_initialises_cuda(monkeypatch):
    def boom(*a):
        raise AssertionError("asked a device before torch initialised CUDA")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", boom)
    monkeypatch.setattr(torch.cuda, "get_device_capability", boom)
    assert visible_archs() is None
    fake_cuda(monkeypatch, (9, 0), (9, 0), (8, 0))
    assert visible_archs() == {"sm_90a", None}
    monkeypatch.delitem(sys.modules, "torch")   # torch not imported: tkreg does not import it
    assert visible_archs() is None


def test_cuda_initialized_reads_only_the_local_arch(monkeypatch, opened):
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    assert opened == ["sm_90a"]
    e = r.entry("tkreg.rms_norm")
    assert e.archs() == ["sm_90a"] and r.sources[0].archs == ["sm_90a"]
    assert len(e.candidates("sm_90a")) > 0 and opened == ["sm_90a"]   # a hit needs nothing more
    r.entry("rms_norm"), r.ensure()
    assert opened == ["sm_90a"]


@pytest.mark.parametrize("caps", [None, [(9, 0), (10, 0)], [(8, 0)]], ids=["not-initialized", "both", "unknown"])
def test_otherwise_everything_is_read(monkeypatch, opened, full_state, caps):
    if caps is None:
        fake_cuda(monkeypatch, (9, 0), initialized=False)
    else:
        fake_cuda(monkeypatch, *caps)
    r = Registry().ensure()
    assert opened == FULL and r._deferred is None
    assert state(r) == full_state


TRIGGERS = ["list_ops", "doctor", "verify", "register_torch", "entry_miss", "qualified_miss", "resolve_other_arch",
            "resolve_unknown_arch", "explain_arch", "complete"]


def _runtime(monkeypatch):
    """A fresh run time that `tkreg list/doctor/verify` and list_ops reach, and each trigger of
    a deferred load on it.  cuda:0 is an H200, the only GPU torch had seen when the registry
    loaded; cuda:1 (a B200) and cuda:2 (an A100) are asked about by resolve only."""
    rt = Runtime(Registry())
    monkeypatch.setattr(runtime, "RUNTIME", rt)
    monkeypatch.setattr(api, "RUNTIME", rt)
    monkeypatch.setattr(torch_library, "register", lambda spec, op_of: True)   # leave torch.ops alone
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 132}))
    x, w = torch.empty(3, 1024, dtype=BF16), torch.empty(1024, dtype=BF16)
    rms = lambda: rt.registry.entry("tkreg.rms_norm")  # noqa: E731
    return rt, {
        "list_ops": lambda: api.list_ops(),
        "doctor": lambda: cli.main(["doctor"]),
        "verify": lambda: cli.main(["verify"]),
        "register_torch": lambda: rt.register_torch(),
        "entry_miss": lambda: pytest.raises(NoKernelError, rt.registry.entry, "tkreg.nope"),
        "qualified_miss": lambda: pytest.raises(NoKernelError, rt.registry.entry, "nobody:tkreg.nope"),
        "resolve_other_arch": lambda: rt.resolve(rms(), 1),
        "resolve_unknown_arch": lambda: pytest.raises(UnsupportedDeviceError, rt.resolve, rms(), 2),
        "explain_arch": lambda: rt.explain("tkreg.rms_norm", (x, w), {}, "sm_100a"),
        "complete": lambda: rt.registry.complete(),
    }


@pytest.mark.parametrize("name", TRIGGERS)
def test_each_trigger_reads_the_rest_once(monkeypatch, opened, full_state, capsys, name):
    rt, triggers = _runtime(monkeypatch)
    fake_cuda(monkeypatch, (9, 0))
    rt.registry.ensure()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: [(9, 0), (10, 0), (8, 0)][dev or 0])
    x, w = torch.empty(3, 1024, dtype=BF16), torch.empty(1024, dtype=BF16)
    explained = rt.explain("tkreg.rms_norm", (x, w), {}, "sm_90a")
    rt.resolve(rt.registry.entry("tkreg.rms_norm"), 0)
    assert opened == ["sm_90a"]                 # the local arch's paths read nothing more
    triggers[name]()
    assert opened == ["sm_90a", "sm_100a"]
    for t in triggers.values():                 # and no path reads it again
        t()
    assert opened == ["sm_90a", "sm_100a"]
    assert state(rt.registry) == full_state
    assert rt.explain("tkreg.rms_norm", (x, w), {}, "sm_90a") == explained
    capsys.readouterr()


def test_the_deferred_load_parses_no_op(monkeypatch, opened):
    """It compares raw specs: parsing every op's plans (`OpEntry.spec`) cost 160 ms."""
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    monkeypatch.setattr(manifest, "_parse_op", lambda *a: pytest.fail("parsed an op"))
    r.complete()
    assert opened == ["sm_90a", "sm_100a"]


def test_an_unreadable_deferred_arch_warns_once_and_keeps_the_local_one(tmp_path, monkeypatch, opened):
    p = tmp_path / "builtin"
    shutil.copytree(BUILTIN_PACKS, p, ignore=shutil.ignore_patterns("*.cubin"))
    (p / "sm_100a" / manifest.FILENAME).write_text("{not json")
    monkeypatch.setattr(registry, "BUILTIN_PACKS", p)
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    with pytest.warns(RuntimeWarning, match="sm_100a unreadable .*corrupt manifest"):
        r.complete()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # once: not again
        r.complete()
    assert r.sources[0].archs == ["sm_90a"] and r.sources[0].state == "loaded" and len(r.sources[0].notes) == 1
    assert r.entry("tkreg.rms_norm").archs() == ["sm_90a"] and opened == ["sm_90a", "sm_100a"]


def test_concurrent_callers_read_once(monkeypatch, opened, full_state):
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    go, done = threading.Barrier(8), []
    threads = [threading.Thread(target=lambda: (go.wait(), done.append(r.complete()))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done == [r] * 8   # none raised
    assert opened == ["sm_90a", "sm_100a"] and state(r) == full_state


# ---- later packs -------------------------------------------------------------------------------
def _pack(tmp_path, name, ops: dict, extends=False, cubins=True):
    """A pack holding, per arch, the built-in ops named (extends=True: as extensions)."""
    for arch, names in ops.items():
        (tmp_path / name / arch).mkdir(parents=True)
        m = json.loads((BUILTIN_PACKS / arch / manifest.FILENAME).read_text())
        m["ops"] = {n: m["ops"][n] for n in names}
        for op in m["ops"].values():
            op["spec"]["extends"] = extends or op["spec"].get("extends", False)
            for v in op["variants"] if cubins else ():
                shutil.copy(BUILTIN_PACKS / arch / v["cubin"], tmp_path / name / arch)
        manifest.dump_json(tmp_path / name / arch / manifest.FILENAME, m)
    return tmp_path / name


@pytest.fixture
def builtin_without_gemm_on_sm90(tmp_path, monkeypatch):
    """A built-in pack whose tkreg.gemm is in sm_100a only (no cubins: the built-in pack's are
    read at their first launch)."""
    every = lambda arch: sorted(json.loads((BUILTIN_PACKS / arch / manifest.FILENAME).read_text())["ops"])  # noqa: E731
    p = _pack(tmp_path, "builtin", {"sm_90a": [n for n in every("sm_90a") if n != "tkreg.gemm"],
                                    "sm_100a": every("sm_100a")}, cubins=False)
    monkeypatch.setattr(registry, "BUILTIN_PACKS", p)
    return p


def test_entry_miss_finds_an_op_of_a_deferred_arch_only(monkeypatch, opened, builtin_without_gemm_on_sm90):
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    assert opened == ["sm_90a"] and "tkreg.gemm" not in r.entries
    assert r.entry("gemm").archs() == ["sm_100a"] and opened == ["sm_90a", "sm_100a"]
    assert r.sources[0].archs == FULL and "tkreg.gemm" in r.sources[0].ops


@pytest.mark.filterwarnings("error")   # no "extends tkreg.gemm, which no pack defines"
def test_a_later_pack_naming_a_deferred_op_reads_the_rest_first(tmp_path, monkeypatch, opened,
                                                                builtin_without_gemm_on_sm90):
    # Plugin a extends tkreg.rms_norm (an op the local arch has) on sm_100a, plugin b tkreg.gemm
    # (an op only the deferred sm_100a has).
    a = _pack(tmp_path, "a", {"sm_100a": ["tkreg.rms_norm"]}, extends=True)
    b = _pack(tmp_path, "b", {"sm_100a": ["tkreg.gemm"]}, extends=True)
    fake_cuda(monkeypatch, (9, 0), initialized=False)
    full = Registry().ensure()
    full._add_pack(a, "plugin:a", plugin="a")
    full._add_pack(b, "plugin:b", plugin="b")
    opened.clear()
    fake_cuda(monkeypatch, (9, 0))
    r = Registry().ensure()
    r._add_pack(a, "plugin:a", plugin="a")
    assert opened == ["sm_90a"]   # a needs nothing deferred: its sm_100a rows go in alone
    assert r.entries["tkreg.rms_norm"].sources["sm_100a"][0][3] == "plugin:a"
    assert all(c.key.startswith("a:") for c in r.entries["tkreg.rms_norm"].candidates("sm_100a"))  # cached
    r._add_pack(b, "plugin:b", plugin="b")
    assert opened == ["sm_90a", "sm_100a"]   # b read sm_100a first ...
    # ... and the built-in rows came first again: the state of a full load.
    assert r.entries["tkreg.rms_norm"].sources["sm_100a"][0][3] == "tkreg (built-in)"
    assert state(r) == state(full)
    assert any(c.key.startswith("a:") for c in r.entries["tkreg.rms_norm"].candidates("sm_100a"))
    assert any(c.key.startswith("b:") for c in r.entries["tkreg.gemm"].candidates("sm_100a"))
