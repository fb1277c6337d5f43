"""Build kernel packs: every (op, variant, arch) lowered, compiled, checked and packed.

Cache hits need no tilelang import; misses run in a process pool (`-j`) with a progress bar.
The pack written is deterministic (sorted manifest, content-derived file names).
"""
from __future__ import annotations

import hashlib
import inspect
import itertools
import os
import shutil
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from tkreg import manifest
from tkreg.elf import sm_of_arch
from tkreg.errors import SpecError
from tkreg.launch_plan import Plan
from tkreg.spec import OpSpec, Variant

from . import cache as cache_mod
from . import sources
from .compile import CompileError, toolchain

DEFAULT_ARCHS = ("sm_90a", "sm_100a")


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Job:
    ref: sources.SourceRef
    op: str
    variant: str   # Variant.key
    arch: str
    key: str

    @property
    def label(self) -> str:
        return f"{self.op}[{self.variant}] @ {self.arch}"


@dataclass
class Report:
    compiled: list = field(default_factory=list)
    cached: list = field(default_factory=list)
    seconds: float = 0.0
    archs: dict = field(default_factory=dict)   # arch -> {op: [variant keys]}


def _compile_job(job: Job, cache_root: str):
    """Worker: lower + extract plan + nvcc + ELF check; returns None or (job label, message)."""
    try:
        from . import compile as comp
        from . import extract_plan as plan_mod
        spec = next(s for s in sources.specs_of(job.ref) if s.name == job.op)
        variant = next(v for v in spec.variants if v.key == job.variant)
        func = spec.factory(**factory_kwargs(spec.factory, variant, job.arch))
        art = comp.lower(func, job.arch, dict(variant.pass_configs))
        plan = plan_mod.extract(spec, variant, func, art)
        work = Path(cache_root) / "work" / job.key[:16]
        source = comp.canonical_source(art.kernel_source)
        flags = comp.device_flags(dict(variant.pass_configs)) + variant.nvcc_flags
        cubin = comp.nvcc(source, job.arch, work, flags)
        shutil.rmtree(work, ignore_errors=True)
        cache_mod.Cache(Path(cache_root)).put(job.key, cubin, plan.to_json(), source)
        return None
    except (CompileError, SpecError) as e:
        return job.label, str(e).replace(f"{job.op}[{job.variant}]: ", "")
    except Exception:
        return job.label, traceback.format_exc(limit=6)


def _brief(text: str, head: int = 12, tail: int = 30) -> str:
    """A long message (tilelang prints its rewritten source on a factory error) cut to its ends."""
    lines = text.rstrip().splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    return "\n".join(lines[:head] + [f"    ... ({len(lines) - head - tail} lines) ..."] + lines[-tail:])


def _grouped(what: str, failures: list) -> str:
    """One block per distinct message, naming every (variant, arch) that gave it."""
    by_msg: dict = {}
    for label, msg in failures:
        by_msg.setdefault(_brief(msg), []).append(label)
    blocks = [f"{', '.join(sorted(labels))}:\n{msg}" for msg, labels in sorted(by_msg.items(), key=lambda kv: sorted(kv[1]))]
    return f"{what} ({len(failures)} variant build(s), {len(blocks)} distinct error(s)):\n\n" + "\n\n".join(blocks)


def _precheck(planned: list, misses: set) -> dict:
    """Before any compile: each uncached variant's factory runs (it only builds the prim_func: no
    lowering, no nvcc) to read its tensors' dtypes, so a broken factory, a dtype the spec declares
    that no variant compiles, or unnamed shared buffers fail in seconds rather than after every
    compile."""
    from .extract_plan import check_shared_names, kernel_dtypes
    failures, seen = [], {}
    for spec, variant, job in planned:
        if job.key in misses:
            try:
                func = spec.factory(**factory_kwargs(spec.factory, variant, job.arch))
                check_shared_names(func)
                seen[job.key] = kernel_dtypes(func)
            except Exception as e:  # noqa: BLE001 - whatever the factory raised is the author's message
                failures.append((job.label, f"{type(e).__name__}: {e}"))
    if failures:
        raise BuildError(_grouped("kernel factories failed", failures))
    return seen


def factory_kwargs(factory, variant: Variant, arch: str) -> dict:
    """The variant's params, plus `arch=` when the factory takes it (per-arch kernels)."""
    kw = variant.kwargs()
    try:
        ps = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return kw
    if "arch" in ps or any(p.kind is p.VAR_KEYWORD for p in ps.values()):
        kw.setdefault("arch", arch)
    return kw


def _check_coverage(spec: OpSpec, arch: str, dtypes: dict) -> list[str]:
    """Each dtype combination the spec declares needs a variant on every arch it is built for.
    `dtypes`: variant key -> {tensor: dtype} of its kernels."""
    free = [t for t in spec.tensors if t.dtypes]
    have = {tuple(d.get(t.name) for t in free) for d in dtypes.values()}
    gaps = []
    for combo in itertools.product(*(t.dtypes for t in free)):
        if combo not in have:
            desc = ", ".join(f"{t.name}={d}" for t, d in zip(free, combo))
            gaps.append(f"{spec.name} declares {desc} but no variant for {arch} compiles it "
                        f"(variants: {sorted(dtypes) or 'none'})")
    return gaps


def _fail_on_gaps(planned: list, dtypes: dict) -> None:
    """`dtypes`: job key -> {tensor: dtype}, from the factories or the compiled plans."""
    per: dict = {}
    for spec, variant, job in planned:
        per.setdefault((spec.name, job.arch), (spec, {}))[1][variant.key] = dtypes[job.key]
    gaps = [g for (_, arch), (spec, d) in sorted(per.items()) for g in _check_coverage(spec, arch, d)]
    if gaps:
        raise BuildError("coverage gaps (an op would fail at run time for a dtype it declares):\n" + "\n".join(gaps))


def plan_jobs(specs_by_ref, archs, only, namespace, cache):
    tc = toolchain().to_json()
    jobs = []
    for ref, specs in specs_by_ref:
        src_hash = ref.source_hash()
        for spec in specs:
            if only and spec.name not in only and spec.short not in only:
                continue
            if namespace and spec.namespace != namespace and not spec.extends:
                raise SpecError(f"{spec.name}: op is outside namespace {namespace!r}; name it "
                                f"`{namespace}.{spec.short}` or set extends=True to add variants to it")
            for arch in archs:
                if arch not in spec.archs:
                    continue
                for v in spec.variants_for(arch):
                    jobs.append((spec, v, Job(ref, spec.name, v.key, arch,
                                              cache_mod.key(src_hash, spec.name, v.to_json(), arch, tc))))
    return jobs


def build(out: Path, archs=DEFAULT_ARCHS, only=(), src="kernels_src", jobs: int | None = None,
          namespace: str | None = "tkreg", cache_root: Path | None = None, progress=True,
          log=print) -> Report:
    t0 = time.time()
    for a in archs:
        try:
            sm_of_arch(a)
        except ValueError as e:
            raise BuildError(f"--arch {a}: {e}") from None
    if len(set(archs)) != len(archs):
        raise BuildError(f"--arch repeats: {archs}")
    cache = cache_mod.Cache(cache_root)
    refs = sources.resolve(src)
    specs_by_ref = [(r, sources.specs_of(r)) for r in refs]
    names = [s.name for _, ss in specs_by_ref for s in ss]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BuildError(f"ops defined twice: {sorted(dup)}")
    unknown = set(only) - set(names) - {n.split(".", 1)[1] for n in names}
    if unknown:
        raise BuildError(f"--only {sorted(unknown)}: no such op; known: {sorted(names)}")
    planned = plan_jobs(specs_by_ref, archs, only, namespace, cache)
    if not planned:
        raise BuildError(f"nothing to build for archs {list(archs)} from {src}")

    report = Report()
    cached = {j.key: cache.get(j.key) for _, _, j in planned}
    misses = [j for _, _, j in planned if cached[j.key] is None]
    report.cached = [j.label for _, _, j in planned if j not in misses]
    if misses:
        early = _precheck(planned, {j.key for j in misses})
        dtypes = {j.key: early[j.key] if j.key in early else Plan.from_json(cached[j.key][1]).uses for _, _, j in planned}
        _fail_on_gaps(planned, dtypes)
        workers = max(1, min(jobs or os.cpu_count() or 1, len(misses)))
        log(f"compiling {len(misses)} variant(s) with {workers} worker(s) "
            f"({len(report.cached)} cached)")
        errors = []
        bar = _progress(len(misses), progress)
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futs = {pool.submit(_compile_job, j, str(cache.root)): j for j in misses}
            for f in as_completed(futs):
                err = f.result()
                if err:
                    errors.append(err)
                else:
                    report.compiled.append(futs[f].label)
                bar.update(1)
        bar.close()
        if errors:
            raise BuildError(_grouped("compile failed", errors))

    tc = toolchain().to_json()
    by_arch: dict = {a: {} for a in archs}
    for spec, variant, job in planned:
        cubin, plan = cache.get(job.key)
        by_arch[job.arch].setdefault(spec.name, (spec, {}))[1][variant.key] = (variant, job, cubin,
                                                                                Plan.from_json(plan))
    _fail_on_gaps(planned, {j.key: by_arch[j.arch][s.name][1][v.key][3].uses for s, v, j in planned})
    for arch, entries in by_arch.items():
        arch_dir = Path(out) / arch
        if arch_dir.exists():
            shutil.rmtree(arch_dir)
        arch_dir.mkdir(parents=True)
        ops = {}
        for name, (spec, vs) in sorted(entries.items()):
            records = []
            for key, (variant, job, cubin, plan) in sorted(vs.items()):
                fname = manifest.cubin_name(name, key)
                (arch_dir / fname).write_bytes(cubin)
                records.append(manifest.VariantRecord(key, fname, hashlib.sha256(cubin).hexdigest(), plan,
                                                      job.ref.source_hash()[:16]))
            ops[name] = manifest.OpRecord(spec, tuple(records))
        manifest.dump(arch_dir / manifest.FILENAME, arch, namespace or "", tc, ops)
        report.archs[arch] = {n: sorted(v[1]) for n, v in entries.items()}
    report.seconds = time.time() - t0
    return report


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total, enabled):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
        return tqdm(total=total, unit="variant", file=sys.stderr)
    except ImportError:
        return _NoBar()
