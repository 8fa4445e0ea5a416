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
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.errors import CompilerFlagError, ToolchainError, TopologyError


# libtpu takes a machine-wide lock (/tmp/libtpu_lockfile) when it loads, so a second process that
# only compiles (a planner next to a test run, a CLI call from a test) would abort. Compile-only
# use shares no chip, so aoizora allows several loads unless the user decided otherwise. It must
# be set before libtpu loads, hence at import time of this module (imported by `aoizora`).
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def require_libtpu() -> None:
    """Raise ToolchainError when libtpu is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        raise ToolchainError(
            "libtpu is not installed, so TPU programs cannot be compiled on this host; "
            "install the pinned toolchain with `make test` or `pip install -e .` (libtpu==0.0.42.1)"
        )


@functools.lru_cache(maxsize=None)
def compile_only_devices(topology_name: str) -> tuple[Any, ...]:
    """The compile-only TPU devices of a slice, in libtpu's order (cached per name)."""
    require_libtpu()
    from jax.experimental import topologies

    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology_name)
    except Exception as exc:  # libtpu reports unknown shapes as a generic runtime error
        raise TopologyError(
            f"libtpu does not accept the TPU slice {topology_name!r} ({_first_line(exc)}); "
            "use a supported slice such as v5e:2x4, v5e:4x4, v6e:4x4, v4:2x2x2 or v5p:2x2x4"
        ) from exc
    return tuple(desc.devices)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# --------------------------------------------------------------------------------------------
# Compiler flags
# --------------------------------------------------------------------------------------------
_FLAG = re.compile(r"--([A-Za-z][A-Za-z0-9_]*)(?:=(\S*))?$")


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
    def parse(cls, text: str | None) -> "CompilerFlags":
        """Flags from `--name=value --other` text (a bare `--name` means `true`)."""
        values: dict[str, str] = {}
        for token in (text or "").split():
            m = _FLAG.match(token)
            if m is None:
                raise CompilerFlagError(
                    f"malformed compiler flag {token!r}; write flags as LIBTPU_INIT_ARGS does, e.g. "
                    "--xla_tpu_enable_async_collective_fusion=true"
                )
            values[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
        return cls(tuple(sorted(values.items())))

    def merged(self, other: "CompilerFlags") -> "CompilerFlags":
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


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of aoizora's own source files: a cached plan is only reused by the code that made it."""
    import aoizora

    root = Path(aoizora.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json") and path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


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
