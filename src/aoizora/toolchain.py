"""Access to the real TPU compiler on a CPU host: libtpu's compile-only devices.

`jax.experimental.topologies.get_topology_desc` returns devices of a described TPU slice that
can be lowered and compiled for, but not run on. Everything in aoizora that needs TPU devices
goes through `compile_only_devices`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.errors import CompilerFlagError, ToolchainError, TopologyError


def allow_multiple_libtpu_loads() -> None:
    """Let libtpu load beside another process that loaded it, unless the user decided otherwise.

    libtpu takes a machine-wide lock file when it loads, so a second process that only compiles (a
    planner next to a test run, a CLI call from a test) would abort. Compile-only use shares no
    chip. The switch must be set before libtpu loads, and children inherit it, so aoizora sets it
    where it starts compiling (`compile_only_devices`, the environment check, the CLI's main) and
    never on `import aoizora`.
    """
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def require_libtpu() -> None:
    """Raise ToolchainError when libtpu is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        raise ToolchainError(
            "libtpu is not installed, so TPU programs cannot be compiled on this host; "
            "install the pinned toolchain with `make test` or `pip install -e .` (libtpu==0.0.42.1)"
        )


@functools.cache
def compile_only_devices(topology_name: str) -> tuple[Any, ...]:
    """The compile-only TPU devices of a slice, in libtpu's order (cached per name)."""
    require_libtpu()
    allow_multiple_libtpu_loads()
    from jax.experimental import topologies

    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology_name)
    except Exception as exc:  # libtpu reports unknown shapes as a generic runtime error
        desc = _one_host_slice(topologies, topology_name, exc)
    return tuple(desc.devices)


_HOST_BLOCK = re.compile(r'chips_per_host_bounds "?(\d+(?:x\d+)*)"?')


def _one_host_slice(topologies: Any, topology_name: str, refusal: Exception) -> Any:
    """The slice described as one host holding all its chips, when libtpu refused it only because
    it is smaller than libtpu's default block of chips per host (2x2x1): v5e:1x1, v5e:1x2, v6e:1x1,
    v5p:1x1x1, tpu7x:1x1x1. Such a slice is part of one host's chips, which a process is given with
    `TPU_CHIPS_PER_PROCESS_BOUNDS` (e.g. 1,1,1 for one chip), and libtpu compiles for it when told
    its chips per host. A slice that does not fit inside that block (v5e:1x4, v5e:3x3), or any
    other refusal, is a TopologyError with libtpu's own first reason."""
    shape = [int(n) for n in topology_name.partition(":")[2].split("x") if n.isdigit()]
    block = _HOST_BLOCK.search(str(refusal))
    if block is not None and shape:
        host = [int(n) for n in block.group(1).split("x")]
        shape += [1] * (len(host) - len(shape))
        if len(shape) == len(host) and all(n <= h for n, h in zip(shape, host, strict=True)):
            try:
                return topologies.get_topology_desc(
                    platform="tpu", topology_name=topology_name, chips_per_host_bounds=tuple(shape))
            except Exception:  # noqa: BLE001 - the first refusal is the one to report
                pass
    raise TopologyError(
        f"libtpu does not accept the TPU slice {topology_name!r} ({_first_line(refusal)}); "
        "use a supported slice such as v5e:2x4, v5e:4x4, v6e:4x4, v4:2x2x2 or v5p:2x2x4"
    ) from refusal


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# --------------------------------------------------------------------------------------------
# Compiler flags
# --------------------------------------------------------------------------------------------
_FLAG = re.compile(r"--([A-Za-z][A-Za-z0-9_]*)(?:=(\S*))?$")
#: libtpu's scoped-VMEM limit (KiB): the VMEM a Pallas kernel's buffers are given, which a
#: strategy's splash tile is chosen with (`Strategy.scoped_vmem_kib`).
SCOPED_VMEM_FLAG = "xla_tpu_scoped_vmem_limit_kib"


@dataclass(frozen=True)
class CompilerFlags:
    """libtpu/XLA flags a program is compiled with, as `LIBTPU_INIT_ARGS` writes them.

    Deployments run with flags (MaxDiffusion's Wan commands set `LIBTPU_INIT_ARGS`), and the flags
    change the compiled program (e.g. async collective fusion), so they are part of a plan. aoizora
    passes them to each compile as `compiler_options` rather than through the environment, which
    libtpu reads once per process. Held sorted by name, the last value of a repeated flag winning
    (as the command line does), so equal flag sets compare and hash equal.
    """

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> CompilerFlags:
        """Flags from `--name=value --other` text (a bare `--name` means `true`)."""
        values: dict[str, str] = {}
        for token in (text or "").split():
            m = _FLAG.match(token)
            if m is None:
                raise CompilerFlagError(
                    f"malformed compiler flag {token[:200]!r}{'…' if len(token) > 200 else ''}; write flags as "
                    "LIBTPU_INIT_ARGS does, e.g. "
                    "--xla_tpu_enable_async_collective_fusion=true"
                )
            values[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
        return cls(tuple(sorted(values.items())))

    def merged(self, other: CompilerFlags) -> CompilerFlags:
        """These flags with `other`'s values taking precedence."""
        return CompilerFlags(tuple(sorted({**dict(self.items), **dict(other.items)}.items())))

    def compiler_options(self) -> dict[str, str]:
        """The flags as `jax.jit(...).lower(...).compile(compiler_options=...)` takes them."""
        return dict(self.items)

    def __str__(self) -> str:
        return " ".join(f"--{name}={value}" for name, value in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


def environment_flags() -> CompilerFlags:
    """The flags in `LIBTPU_INIT_ARGS`, which libtpu applies to every compile of this process."""
    return CompilerFlags.parse(os.environ.get("LIBTPU_INIT_ARGS", ""))


#: Environment variables that change what libtpu/XLA compile (the compile cache keys them).
COMPILER_ENVIRONMENT_VARIABLES = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")


def compiler_environment() -> dict[str, str]:
    """The compiler flags this process's environment gives every compile (unset: "")."""
    return {k: os.environ.get(k, "") for k in COMPILER_ENVIRONMENT_VARIABLES}


#: compile(lowered, flags): a lowered jax program compiled with compiler `flags` (None: none)
LoweredCompile = Callable[[Any, "CompilerFlags | None"], Any]


def compile_lowered(lowered: Any, flags: CompilerFlags | None = None) -> Any:
    """`lowered.compile()` with `flags` as compiler options."""
    if flags:
        return lowered.compile(compiler_options=flags.compiler_options())
    return lowered.compile()


@functools.lru_cache(maxsize=32)
def check_compiler_flags(flags: CompilerFlags, topology_name: str) -> None:
    """Raise CompilerFlagError unless libtpu accepts `flags` for a slice (a tiny compile, ~1 s).

    Checked before any long work: libtpu validates names and values (`true`, `false`, `auto`, ...)
    only when it compiles.
    """
    if not flags:
        return
    import jax
    import jax.numpy as jnp

    device = compile_only_devices(topology_name)[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    lowered = jax.jit(lambda x: x + 1).lower(jax.ShapeDtypeStruct((8, 128), jnp.float32, sharding=sharding))
    try:
        compile_lowered(lowered, flags)
    except Exception as exc:  # libtpu reports unknown flags and bad values as INVALID_ARGUMENT
        raise CompilerFlagError(
            f"libtpu refuses the compiler flags ({_first_line(exc)}); fix or drop that flag in --libtpu-args"
        ) from None


# What reads the compiler environment variables, in a child: XLA reads XLA_FLAGS when its first
# backend starts, libtpu reads LIBTPU_INIT_ARGS when it loads. Either ends its process with exit 1
# on a flag it does not know (before Python can catch anything), so the check cannot run in this one.
_ENVIRONMENT_PROBE = """
import importlib.util, jax
jax.devices("cpu")
if importlib.util.find_spec("libtpu") is not None:
    from jax.experimental import topologies
    topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
"""
_XLA_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS: *(.*)")
_LIBTPU_UNKNOWN = re.compile(r"Unknown command line flag '([^']*)'")


def _probe_dying_with(parent_pid: int) -> str:
    """The probe, ended with its parent (`die_with_parent`) however the parent dies. Where this
    package cannot be imported (a path the parent set up itself), the probe runs untied."""
    return (f"try:\n    from aoizora.interrupts import die_with_parent\nexcept ImportError:\n    pass\n"
            f"else:\n    die_with_parent({parent_pid})\n{_ENVIRONMENT_PROBE}")


def check_compiler_environment(verdicts: str | os.PathLike[str] | None = None) -> None:
    """Raise CompilerFlagError, naming the variable, unless XLA and libtpu start with this process's
    `XLA_FLAGS` and `LIBTPU_INIT_ARGS` (nothing to check when both are unset).

    Checked in a child process (a few seconds); an environment that passed is remembered in the
    folder `verdicts` (None: not remembered), keyed by the two variables and the toolchain."""
    allow_multiple_libtpu_loads()
    env = compiler_environment()
    if not any(env.values()):
        return
    import subprocess
    import sys

    from aoizora.store import ChecksummedStore

    versions = {name: _installed_version(name) for name in ("jax", "jaxlib", "libtpu")}
    key = hashlib.sha256(json.dumps({"env": env, "versions": versions, "python": sys.executable},
                                    sort_keys=True).encode()).hexdigest()[:32]
    store = ChecksummedStore(verdicts, field="verdict", what="environment check") if verdicts is not None else None
    if store is not None and store.load(key) is not None:
        return
    try:
        child = subprocess.run([sys.executable, "-c", _probe_dying_with(os.getpid())], capture_output=True,
                               text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    except subprocess.TimeoutExpired:  # a host too slow to tell: the command itself will find out
        return
    if child.returncode != 0:
        raise CompilerFlagError(_environment_refusal(child.stderr, child.returncode))
    if store is not None:
        store.store(key, {"ok": True, **env})


def _environment_refusal(stderr: str, code: int) -> str:
    """The one line that says which variable the compiler refused, from the probe's stderr."""
    xla = _XLA_UNKNOWN.search(stderr)
    if xla:
        return f"XLA_FLAGS holds a flag XLA does not know ({xla.group(1).strip()[:200]}); fix or unset XLA_FLAGS"
    libtpu = _LIBTPU_UNKNOWN.search(stderr)
    if libtpu:
        return (f"LIBTPU_INIT_ARGS holds a flag libtpu does not know ({libtpu.group(1)}); "
                "fix or unset LIBTPU_INIT_ARGS")
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), f"exit {code}")
    return (f"jax and libtpu do not start with this environment's LIBTPU_INIT_ARGS and XLA_FLAGS ({last[:200]}); "
            "fix or unset them")


def _installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of aoizora's own source files: a cached plan is only reused by the code that made it."""
    root = Path(__file__).parent  # the `aoizora` package, which holds this module
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json") and path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def aoizora_version() -> str:
    """aoizora's version (`aoizora.__version__`): pyproject.toml states it, the installed metadata carries it."""
    return importlib.metadata.version("aoizora")


def toolchain_versions() -> dict[str, str]:
    """The versions of jax, jaxlib and libtpu: what a compiled program and a plan depend on."""
    import jax
    import jaxlib

    try:
        libtpu = importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        libtpu = "absent"
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "libtpu": libtpu}


def compile_environment() -> dict[str, str]:
    """What a compiled program depends on besides its input and flags: the toolchain versions,
    aoizora's source (which lowers it) and the compiler flags of the environment. Two processes
    with equal environments compile a lowered program to the same output."""
    return {**toolchain_versions(), "aoizora": source_fingerprint(), **compiler_environment()}
