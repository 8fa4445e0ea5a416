"""Per-generation hardware profiles, read from the packaged data file `data/hardware.json`."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from aoizora.errors import TopologyError

#: The tile JAX's runtime lays a 16-bit array out in when it is put on a TPU device without a
#: `Format` (and so the tile of every such program argument), on every generation; checked against
#: the compiler by tests/topology/test_topology.py::test_tile_16bit_is_what_the_compiler_wants.
RUNTIME_TILE_16BIT: tuple[int, int] = (8, 128)


@dataclass(frozen=True)
class KernelWork:
    """What bounds an opaque kernel (a Pallas call) besides its FLOPs and HBM bytes.

    `matmul_dim`: its narrowest matmul dimension (an attention kernel's head dim), which leaves
    part of the MXU empty when below the systolic array's side. `score_elements`: for an attention
    kernel, the elements of the score matrix it computes, each costing the softmax's vector work.
    `grid_steps`: the iterations of the kernel's Pallas grid, each paying a fixed cost.
    `narrow_fraction`: the share of its FLOPs in matmuls whose contraction is `matmul_dim` (the
    rest run at the full array); `mxu_efficiency`: the fraction of that MXU roofline the kernel
    reaches, where a measurement of the kernel says so (1: the roofline itself).
    `compute_blocks_per_step`: for JAX's splash kernel, the K/V compute sub-blocks each grid step
    runs (block_kv / block_kv_compute); None for any other kernel. It marks the call as a splash
    call, costed with the splash kernel's own measured figures where the profile has them
    (`HardwareProfile.splash_unoverlapped_element_s`, `splash_grid_step_s`,
    `splash_kv_stream_byte_s`). `kv_stream_bytes`: for a splash call, the bytes of K and V its Q
    blocks re-read from HBM (part of its HBM bytes).
    """

    matmul_dim: int | None = None
    score_elements: float | None = None
    grid_steps: int | None = None
    narrow_fraction: float = 1.0
    mxu_efficiency: float = 1.0
    compute_blocks_per_step: int | None = None
    kv_stream_bytes: float | None = None


@dataclass(frozen=True)
class HardwareProfile:
    """What one chip of a TPU generation offers (or, from `per_device`, one device's share of it).

    Bandwidths are bytes per second. `hbm_bytes`, `hbm_bandwidth_Bps` and `peak_bf16_flops` are
    per chip in `data/hardware.json`; `hbm_usable_bytes` is libtpu's limit per device.
    """

    generation: str
    device_kinds: tuple[str, ...]
    ici_dims: int
    ici_ports_per_chip: int
    link_bandwidth_Bps: float  # one direction of one ICI link
    d2d_bandwidth_Bps: float | None  # one direction of the die-to-die link between a chip's cores; None: none
    hbm_bytes: int
    hbm_usable_bytes: int  # what the compiler lets one program use on one device (less than its HBM)
    hbm_bandwidth_Bps: float
    peak_bf16_flops: float
    clock_hz: float
    hop_latency_s: float
    wraparound: str  # rule name, see `wraps`
    #: the generation's largest public slice, no larger than its pod: most chips, and (2-D pods) the
    #: longest side; None: not bounded
    largest_slice_chips: int | None = None
    largest_slice_dim: int | None = None
    collective_launch_s: float = 0.0  # fixed time of every collective however small (launch and completion)
    mxu_dim: int = 128  # side of the MXU's systolic array: a matmul dimension below it leaves the array part-empty
    #: score elements per second the splash attention kernel's vector work (max, subtract, exp,
    #: sum per element of the score matrix) sustains, per chip; None where it was not measured
    attention_score_elements_per_s: float | None = None
    #: fixed time of one iteration of a Pallas kernel's grid on one TensorCore (its pipeline's DMA
    #: issue and wait, loop control), paid on top of the iteration's work
    pallas_grid_step_s: float = 0.0
    #: JAX's splash kernel, where measured on the chip (None: not measured; the generic figures
    #: above cost it): per score element, the part of a grid step's QK^T -> softmax -> PV chain on
    #: one K/V compute sub-block that nothing overlaps (paid once per grid step, so 1/n of the
    #: elements with n sub-blocks per step), the fixed cost of one of its grid steps, and the
    #: fixed cost of one call (its launch, the prefetch of the mask's block tables, the pipeline's
    #: first and last copies)
    splash_unoverlapped_element_s: float | None = None
    splash_grid_step_s: float | None = None
    splash_call_s: float | None = None
    #: JAX's splash kernel, where measured: the time per byte of K/V its Q blocks re-read from HBM
    #: that the overlapped work does not hide (each Q block streams its map's whole K/V again, and
    #: the DMA of a step's K/V block is not fully behind the previous step's work), paid on top
    splash_kv_stream_byte_s: float | None = None
    #: where the splash kernel was measured: the splash model's median relative error on calls it
    #: was not fitted on (None: not measured). The tile search proposes a raised scoped-VMEM limit
    #: only for a tile whose predicted gain is larger: a smaller one is within what the model
    #: resolves, and the raised limit changes the rest of the program by a measured -10 % to +24 %
    #: (which Stage 2 checks by a compile at it: `aoizora.stage2.limit_check`)
    splash_model_error: float | None = None
    #: kind of instruction (`aoizora.hlo.program.estimate_kind`) -> the chip's time over the
    #: compiler's cycle estimate, where the generation's chip measured it per operation; a kind
    #: not named is costed at the estimate as is (empty: not measured)
    estimate_scale: dict[str, float] = field(default_factory=dict, compare=False)
    tensorcores_per_chip: int = 1
    #: whether libtpu compiles an all-gather of an activation the program computes as an
    #: asynchronous collective fusion, which holds a second buffer of the result outside its
    #: buffer assignment (with its default flags); otherwise the all-gather is synchronous
    async_collective_fusion: bool = False
    #: (second-minor, minor) tile libtpu lays a 16-bit array out in where it picks the layout (a
    #: matmul operand); a program argument the runtime hands over in `RUNTIME_TILE_16BIT` is
    #: copied into it before use when the two differ (a stacked weight inside the layer loop)
    tile_16bit: tuple[int, int] = (8, 128)
    #: local batch -> the largest splash block_q whose VMEM working set the compiler accepts on one
    #: device (2048-key blocks computed 1024 at a time, head_dim 128); empty: not measured
    splash_max_block_q: dict[int, int] = field(default_factory=dict, compare=False)
    #: libtpu's default scoped VMEM limit (KiB, `toolchain.SCOPED_VMEM_FLAG`) as its refusals
    #: state it, and the chip's VMEM its refusals past it state, the most any limit gives a kernel
    #: (None: not measured)
    scoped_vmem_default_kib: int | None = None
    scoped_vmem_max_kib: int | None = None
    #: local batch -> the splash working-set rule's (base, per_q_row, per_kv_row, per_score,
    #: margin) in bytes (see `aoizora.models.wan.kernels.vmem`); empty: not measured
    splash_vmem: dict[int, tuple[float, ...]] = field(default_factory=dict, compare=False)
    accelerator_types: dict[str, str] = field(default_factory=dict, compare=False)  # "8" -> "2x2x1"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    devices_per_chip: int = 1  # 1 for the chip's own profile; >1 for a device's share (`per_device`)

    def per_device(self, devices_per_chip: int) -> HardwareProfile:
        """One device's share of a chip that libtpu exposes as `devices_per_chip` devices.

        Each device is one TensorCore with its own half of the chip's HBM (v4 without megacore,
        TPU7x), so it gets an equal share of the chip's peak FLOP/s, HBM, HBM bandwidth and
        attention vector throughput, and no longer shares a Pallas grid with the other core.
        Links are unchanged (a link's bandwidth is the link's); `hbm_usable_bytes` is already
        libtpu's per-device limit.
        """
        if devices_per_chip < 1:
            raise TopologyError(f"a chip exposes at least one device, not {devices_per_chip}")
        if devices_per_chip == self.devices_per_chip:
            return self
        share = self.devices_per_chip / devices_per_chip
        return dataclasses.replace(
            self,
            hbm_bytes=int(self.hbm_bytes * share),
            hbm_bandwidth_Bps=self.hbm_bandwidth_Bps * share,
            peak_bf16_flops=self.peak_bf16_flops * share,
            attention_score_elements_per_s=(None if self.attention_score_elements_per_s is None
                                            else self.attention_score_elements_per_s * share),
            splash_unoverlapped_element_s=(None if self.splash_unoverlapped_element_s is None
                                           else self.splash_unoverlapped_element_s / share),
            splash_kv_stream_byte_s=(None if self.splash_kv_stream_byte_s is None
                                     else self.splash_kv_stream_byte_s / share),
            devices_per_chip=devices_per_chip,
        )

    def roofline_seconds(self, flops: float, hbm_bytes: float, kernel: KernelWork | None = None) -> float:
        """Time of work the compiler gives no estimate for (e.g. an opaque kernel), on this device.

        The slowest of three units: the MXU at peak, derated when the kernel's narrowest matmul
        dimension (`kernel.matmul_dim`, an attention kernel's head_dim) is below the systolic
        array's side so part of it stays empty (for `kernel.narrow_fraction` of the FLOPs, at
        `kernel.mxu_efficiency` of that roofline); HBM at its bandwidth; and, for an attention kernel,
        its per-element vector work (`kernel.score_elements` at `attention_score_elements_per_s`).
        A Pallas kernel also pays `pallas_grid_step_s` per iteration of its grid
        (`kernel.grid_steps`) on top: small blocks mean many short iterations. A splash call
        (`kernel.compute_blocks_per_step` set) on a generation where the kernel was measured pays
        its own per-step cost instead, the un-overlapped part of each step's chain
        (`splash_unoverlapped_element_s` per score element over the sub-blocks per step), the
        un-hidden part of its K/V re-reads (`splash_kv_stream_byte_s` per byte of
        `kernel.kv_stream_bytes`), and its fixed cost per call (`splash_call_s`): `flops`, bytes,
        elements and steps are one call's.
        Q1, Q2 and the simulator all cost such work here.
        """
        kernel = kernel or KernelWork()
        fill = min(1.0, kernel.matmul_dim / self.mxu_dim) if kernel.matmul_dim else 1.0
        if kernel.narrow_fraction == 1.0:
            mxu = flops / (self.peak_bf16_flops * fill)
        else:
            mxu = flops * (kernel.narrow_fraction / fill + 1.0 - kernel.narrow_fraction) / self.peak_bf16_flops
        seconds = max(mxu / kernel.mxu_efficiency, hbm_bytes / self.hbm_bandwidth_Bps)
        if kernel.score_elements and self.attention_score_elements_per_s:
            seconds = max(seconds, kernel.score_elements / self.attention_score_elements_per_s)
        step = self.grid_step_seconds
        if kernel.compute_blocks_per_step is not None:
            if kernel.score_elements and self.splash_unoverlapped_element_s:
                seconds += kernel.score_elements * self.splash_unoverlapped_element_s / kernel.compute_blocks_per_step
            if kernel.kv_stream_bytes and self.splash_kv_stream_byte_s:
                seconds += kernel.kv_stream_bytes * self.splash_kv_stream_byte_s
            if self.splash_grid_step_s is not None:
                step = self.splash_grid_step_s * self.devices_per_chip / self.tensorcores_per_chip
            seconds += self.splash_call_s or 0.0
        return seconds + (kernel.grid_steps or 0) * step

    @property
    def grid_step_seconds(self) -> float:
        """Fixed cost of one Pallas grid iteration on one device: a device made of several
        TensorCores (a megacore chip) splits the grid's parallel iterations among them."""
        return self.pallas_grid_step_s * self.devices_per_chip / self.tensorcores_per_chip

    def wraps(self, shape: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice of this shape have wraparound links."""
        if self.wraparound == "axes_of_size_16":
            # v5e/v6e: a sub-slice only closes a ring along an axis that spans the full pod (16).
            return tuple(n == 16 for n in shape)
        if self.wraparound == "all_axes_when_all_multiple_of_4":
            # v4/v5p/TPU7x: optical switches close every axis once the slice is made of whole 4x4x4 cubes.
            full = all(n % 4 == 0 for n in shape)
            return tuple(full and n > 2 for n in shape)
        raise TopologyError(f"unknown wraparound rule {self.wraparound!r} in hardware.json")

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "ici_dims": self.ici_dims,
            "ici_ports_per_chip": self.ici_ports_per_chip,
            "link_bandwidth_Bps": self.link_bandwidth_Bps,
            "d2d_bandwidth_Bps": self.d2d_bandwidth_Bps,
            "devices_per_chip": self.devices_per_chip,
            "hbm_bytes": self.hbm_bytes,
            "hbm_usable_bytes": self.hbm_usable_bytes,
            "hbm_bandwidth_Bps": self.hbm_bandwidth_Bps,
            "peak_bf16_flops": self.peak_bf16_flops,
            "mxu_dim": self.mxu_dim,
            "attention_score_elements_per_s": self.attention_score_elements_per_s,
            "clock_hz": self.clock_hz,
            "hop_latency_s": self.hop_latency_s,
            "collective_launch_s": self.collective_launch_s,
            "pallas_grid_step_s": self.pallas_grid_step_s,
            "splash_unoverlapped_element_s": self.splash_unoverlapped_element_s,
            "splash_grid_step_s": self.splash_grid_step_s,
            "splash_call_s": self.splash_call_s,
            "splash_kv_stream_byte_s": self.splash_kv_stream_byte_s,
            "splash_model_error": self.splash_model_error,
            "estimate_scale": dict(self.estimate_scale),
            "tensorcores_per_chip": self.tensorcores_per_chip,
            "async_collective_fusion": self.async_collective_fusion,
            "tile_16bit": list(self.tile_16bit),
            "splash_max_block_q": {str(b): q for b, q in self.splash_max_block_q.items()},
            "scoped_vmem_default_kib": self.scoped_vmem_default_kib,
            "scoped_vmem_max_kib": self.scoped_vmem_max_kib,
            "splash_vmem": {str(b): list(c) for b, c in self.splash_vmem.items()},
            "sources": dict(self.sources),
        }


@functools.cache
def _table() -> dict[str, Any]:
    text = resources.files("aoizora").joinpath("data/hardware.json").read_text()
    return json.loads(text)


def generation_names() -> tuple[str, ...]:
    """Canonical generation names (v5e, v6e, v4, v5p, tpu7x)."""
    return tuple(_table()["generations"])


def canonical_generation(name: str) -> str:
    """Map a generation name or alias (e.g. `v5` -> `v5p`) to its canonical name."""
    table = _table()
    key = name.strip().lower()
    key = table["aliases"].get(key, key)
    if key not in table["generations"]:
        known = ", ".join(sorted([*table["generations"], *table["aliases"]]))
        raise TopologyError(f"unknown TPU generation {name!r}; use one of: {known}")
    return key


def hardware_profile(generation: str) -> HardwareProfile:
    """The hardware profile of a generation (aliases accepted)."""
    gen = canonical_generation(generation)
    raw = dict(_table()["generations"][gen])
    raw["device_kinds"] = tuple(raw["device_kinds"])
    raw.setdefault("d2d_bandwidth_Bps", None)
    if "tile_16bit" in raw:
        raw["tile_16bit"] = tuple(int(n) for n in raw["tile_16bit"])
    raw["splash_max_block_q"] = {int(b): int(q) for b, q in raw.get("splash_max_block_q", {}).items()}
    raw["splash_vmem"] = {int(b): tuple(float(x) for x in c) for b, c in raw.get("splash_vmem", {}).items()}
    raw["estimate_scale"] = {str(k): float(v) for k, v in raw.get("estimate_scale", {}).items()}
    return HardwareProfile(generation=gen, **raw)


def generation_aliases() -> dict[str, str]:
    """Alias -> canonical generation name (e.g. `v7x` -> `tpu7x`)."""
    return dict(_table()["aliases"])
