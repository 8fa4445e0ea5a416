"""Plan one Wan video on several slices and compare them: per slice the chosen strategy, the video
time, videos per hour, chip-hours and cost per video, and the cheapest slice that meets a latency
target.

Each slice is planned as `aoizora plan` plans it (the same request, the plan, Stage 1 and compile
caches, compiles on the executor given), one after another; a slice no strategy fits on is kept
in the table with the reason instead of stopping the comparison.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from aoizora.compare.prices import ChipPrice, PriceTable, default_prices
from aoizora.errors import ArgumentError, PlanningError
from aoizora.plan_video import common_basis, denoising_steps, video_seconds, video_time_includes, videos_per_run
from aoizora.slice_costs import (
    Pick,
    SliceCandidate,
    chip_hours_per_video,
    cost_per_video,
    meets_target,
    pick_cheapest,
    videos_per_hour,
)
from aoizora.store import one_line

if TYPE_CHECKING:
    from aoizora.plan import PlanResult
    from aoizora.topology import Topology
    from aoizora.workload import StrategySpace

#: Most slices one comparison plans (each is a full plan; a longer list is more likely a mistake).
MAX_SLICES = 32


@dataclass(frozen=True)
class SliceRow:
    """One slice of the comparison: its plan's choice and what a video costs on it (None where a
    number cannot be had: no plan, or no price; `error` says why there is no plan)."""

    topology: str
    generation: str
    chips: int
    strategy: str | None
    placement: str | None
    step_seconds: float | None
    steps: int | None
    videos_per_run: int | None
    video_seconds: float | None
    videos_per_hour: float | None
    chip_hours_per_video: float | None
    price: ChipPrice
    cost_per_video: float | None
    meets_target: bool | None
    from_cache: bool = False
    error: str | None = None
    video_time_includes: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["price"] = self.price.to_json()
        return out


def slice_row(plan: dict[str, Any], chips: int, price: ChipPrice, max_video_seconds: float | None,
              from_cache: bool = False) -> SliceRow:
    """A planned slice's row, from its plan file's JSON (`Plan.data`)."""
    seconds = video_seconds(plan)
    per_run = videos_per_run(plan)
    chip_hours = chip_hours_per_video(chips, seconds, per_run)
    topo = plan["topology"]
    return SliceRow(topo["name"], topo["generation"], chips, plan["strategy"]["key"], plan["placement"]["name"],
                    float(plan["prediction"]["step_seconds"]), denoising_steps(plan), per_run, seconds,
                    videos_per_hour(seconds, per_run), chip_hours, price,
                    cost_per_video(chip_hours, price.per_chip_hour), meets_target(seconds, max_video_seconds),
                    from_cache, video_time_includes=video_time_includes(plan))


def failed_row(topology: Topology, price: ChipPrice, error: str) -> SliceRow:
    """The row of a slice that got no plan, with the reason."""
    return SliceRow(topology.name, topology.generation, topology.num_chips, None, None, None, None, None, None, None,
                    None, price, None, None, error=error)


@dataclass(frozen=True)
class Comparison:
    """Every slice's row, the prices used, the latency target and the pick."""

    workload: dict[str, Any]
    rows: tuple[SliceRow, ...]
    prices: PriceTable
    max_video_seconds: float | None
    pick: Pick

    @property
    def video_time_includes(self) -> str:
        """What the slices' video times include (`aoizora.plan_video`): one basis, or that they differ."""
        return common_basis([r.video_time_includes for r in self.rows if r.video_time_includes is not None])

    def to_json(self) -> dict[str, Any]:
        """The comparison as strict JSON (`aoizora compare --json` and `--out DIR/compare.json`)."""
        return {"workload": self.workload, "video_time_includes": self.video_time_includes,
                "max_video_seconds": self.max_video_seconds, "prices": self.prices.to_json(),
                "slices": [r.to_json() for r in self.rows],
                "pick": {"topology": self.pick.name, "reason": self.pick.reason}}


def pick_of(rows: Sequence[SliceRow], max_video_seconds: float | None) -> Pick:
    """The cheapest planned slice per video within the target (see `pick_cheapest`)."""
    return pick_cheapest([SliceCandidate(r.topology, r.video_seconds, r.cost_per_video) for r in rows
                          if r.video_seconds is not None], max_video_seconds)


def parse_slices(slices: str | Sequence[str], option: str = "slices") -> list[Topology]:
    """The slices named in a comma-separated list (or a sequence of names), each checked before any
    planning (TopologyError for an unknown one, ArgumentError for an empty or repeated entry)."""
    from aoizora.topology import get_topology

    names = [s.strip() for s in slices.split(",")] if isinstance(slices, str) else [str(s).strip() for s in slices]
    if not names or any(not n for n in names):
        raise ArgumentError(f"{option} has an empty entry; list slices separated by commas, e.g. v5e:2x4,v6e:2x4")
    if len(names) > MAX_SLICES:
        raise ArgumentError(f"{option} lists {len(names)} slices, more than {MAX_SLICES}; compare fewer at once")
    topologies = [get_topology(n) for n in names]
    seen: dict[str, str] = {}
    for given, topo in zip(names, topologies, strict=True):
        if topo.name in seen:
            raise ArgumentError(f"{option} lists {topo.name} twice ({seen[topo.name]!r} and {given!r}); list it once")
        seen[topo.name] = given
    return topologies


def compare_wan(model: str, slices: str | Sequence[str], resolution: str | None = None, frames: int | None = None,
                *, prices: PriceTable | None = None, max_video_seconds: float | None = None,
                on_slice: Callable[[int, Topology], None] | None = None, vae_decode: bool = True,
                **plan_options: Any) -> Comparison:
    """Plan a Wan video (model, resolution, frames as `aoizora plan` takes them) on each slice and
    compare them. The slices and the video shape are checked for every slice before any planning.

    `prices`: per-chip-hour prices (default: the packaged ones); `max_video_seconds`: the latency
    target the pick must meet; `on_slice(i, topology)` is called before planning each slice (e.g.
    to print progress); `vae_decode`: cost each slice's VAE decode for its end-to-end video time
    (False: the denoising steps alone, as `--no-vae-decode`). Other keywords go to `plan_space`
    (`top_k`, `verify_top`, `use_cache`, `libtpu_args`, ...); every slice compiles on one `executor`
    (default: local compile processes, `DEFAULT_COMPILE_WORKERS` of them, started once). Raises
    TopologyError, ShapeError or ArgumentError on bad input."""
    from aoizora.api import wan_request, wan_request_space

    topologies = parse_slices(slices)
    table = prices if prices is not None else default_prices()
    spaces = []
    for topo in topologies:
        request = wan_request(model, resolution, frames, kernel=None, from_maxdiffusion=None, topology=topo)
        spaces.append(wan_request_space(request, topo, vae_decode=vae_decode))
    rows = []
    with _one_executor(plan_options) as options:
        for i, (topo, space) in enumerate(zip(topologies, spaces, strict=True)):
            if on_slice is not None:
                on_slice(i, topo)
            rows.append(_plan_row(space, topo, table.price(topo.generation), max_video_seconds, options))
    workload = {"model": model, "resolution": request["resolution"], "frames": request["frames"]}
    return Comparison(workload, tuple(rows), table, max_video_seconds, pick_of(rows, max_video_seconds))


@contextlib.contextmanager
def _one_executor(plan_options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """`plan_options` with an executor: the one given, or local compile processes started once for
    every slice (rather than once per slice, as `plan_space` would) and closed on leaving."""
    if plan_options.get("executor") is not None:
        yield plan_options
        return
    from aoizora.defaults import DEFAULT_COMPILE_WORKERS
    from aoizora.stage2 import CompileWorkers

    with CompileWorkers(DEFAULT_COMPILE_WORKERS) as pool:
        yield {**plan_options, "executor": pool}


def _plan_row(space: StrategySpace, topo: Topology, price: ChipPrice, max_video_seconds: float | None,
              plan_options: dict[str, Any]) -> SliceRow:
    from aoizora.plan import plan_space

    try:
        outcome: PlanResult = plan_space(space, topo, **plan_options)
    except PlanningError as exc:
        return failed_row(topo, price, one_line(str(exc), 400))
    return slice_row(outcome.plan.data, topo.num_chips, price, max_video_seconds, outcome.from_cache)
