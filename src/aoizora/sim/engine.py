"""The event loop: devices walking the SPMD schedule, collectives as transfer DAGs, a flow network.

Model (why each choice, in short):

* **Devices.** Every logical device runs the same schedule (`Program.nodes`) on one in-order
  compute stream. Compute nodes only advance the device's own clock (they touch no shared
  resource), so a run of compute nodes is one step to the next *yield* node: a collective issue
  (sync op or ``-start``), a ``-done``, or a loop's closing ``while`` node.
* **Collectives.** Issuing a collective joins its run (one run per loop iteration, keyed by
  the collective and the enclosing loop counters). A device's part of the run is launched the
  hardware's ``collective_launch_s`` after it issued it (the fixed cost every collective pays,
  shared with Q2 as a figure, not as a formula). A transfer may start once its source and
  destination devices have both launched the run and its prerequisites were delivered. A sync
  collective blocks its device until all transfers it sends or receives are delivered; an
  async one blocks only at its ``-done``, so compute between start and done overlaps it.
* **Network.** A transfer on a multi-hop route is one flow on every link of the route at once
  (cut-through), sharing links max-min fairly with all other flows; when its last byte is sent
  it is delivered ``hops x hop_latency`` later. Every link has its own capacity (a TPU7x
  die-to-die link between the two cores of a chip is a link like the ICI ones, ~6x faster).
  Transfers with an empty route (two cores of a v4 chip, which share a die) are delivered at once.
* **Loops.** Bodies are walked iteration by iteration. With ``extrapolate_loops`` the loop is
  cut short once it is provably periodic: at a *quiescent* moment (no flow, no unfinished
  collective run; every device parked at a known node with a known time), the whole future is a
  function of (each device's node, loop counters, time relative to now), since the dynamics are
  deterministic and time-invariant. When that state recurs one iteration later (times equal to
  within 1e-9 of the iteration period, i.e. up to float rounding), every remaining iteration
  repeats it, so the remaining ones are skipped and their time, link bytes and collective
  statistics are added as multiples of the last iteration's increment.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from aoizora.errors import PlacementError, SimulationError
from aoizora.hlo.algorithm import RingDirection, RingOrder
from aoizora.hlo.program import Node, NodeKind, Program
from aoizora.placement import Placement
from aoizora.sim.algorithms import TransferPlan, build_plan
from aoizora.sim.network import FlowNetwork
from aoizora.sim.result import CollectiveTiming, SimResult
from aoizora.topology import Topology

OpaqueSeconds = Mapping[str, float] | Callable[[Node], "float | None"] | None

_COMPUTE, _SYNC, _START, _DONE, _LOOP = 0, 1, 2, 3, 4

#: Times closer than this (seconds) are one instant. Far below any modelled duration (the
#: shortest is a hop latency, ~1e-6 s), far above float rounding of times (~1e-18 s).
TIME_EPS = 1e-13
_EV_DEVICE, _EV_TX_END, _EV_DELIVER, _EV_LAUNCH = 0, 1, 2, 3


class _Run:
    """One run of one collective: the mutable state over its (shared, immutable) plan."""

    __slots__ = ("serial", "plan", "coll", "missing", "issued", "enabled", "queues", "busy", "pending",
                 "left", "first_issue", "waiters", "finished")

    def __init__(self, serial: int, plan: TransferPlan, coll: int):
        self.serial = serial
        self.plan = plan
        self.coll = coll
        self.missing = [len(p) for p in plan.prereqs]
        self.issued: set[int] = set()
        self.enabled = bytearray(len(plan.src))
        self.queues: list[list[tuple[int, int]]] = [[] for _ in range(plan.n_senders)]
        self.busy = bytearray(plan.n_senders)
        self.pending = dict(plan.involvement)
        self.left = len(plan.src)
        self.first_issue: float | None = None
        self.waiters: dict[int, int] = {}  # physical device -> logical device blocked on this run
        self.finished = False


class Simulator:
    """One simulation; use `aoizora.sim.simulate`."""

    def __init__(self, program: Program, topology: Topology, placement: Placement, *,
                 ring_order: RingOrder | str, opaque_seconds: OpaqueSeconds, chunks: int,
                 ring_direction: RingDirection | str | None, default_direction: RingDirection | str,
                 extrapolate_loops: bool, default_trip_count: int | None):
        _validate(program, topology, placement, chunks)
        self.program = program
        self.topology = topology
        self.ring_order, self.ring_direction, self.default_direction = ring_switches(
            ring_order, ring_direction, default_direction)
        self.chunks = chunks
        self.extrapolate = extrapolate_loops
        self.warnings: list[str] = []
        self.hop_latency = topology.hardware.hop_latency_s
        self.launch = topology.hardware.collective_launch_s
        n = program.num_devices
        flat = [int(d) for d in placement.device_ids.ravel()]
        self.l2p = flat[:n]
        self.n = n
        self.nodes = program.nodes
        self._roles(program)
        self._durations(program, opaque_seconds)
        self.trips = self._trips(program, default_trip_count)
        self.chain = self._loop_chains(program)
        # mutable state
        self.now = 0.0
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = 0
        self.events = 0
        cap = np.array([l.bandwidth_Bps for l in topology.links], dtype=float)
        self.net = FlowNetwork(cap)
        self.flows: dict[int, tuple[_Run, int]] = {}
        self._flow_id = 0
        self.plans: dict[int, TransferPlan] = {}
        self.runs: dict[tuple, _Run] = {}
        self.unfinished = 0
        self._finished_in_instant = False
        self._dirty: dict[tuple[int, int], _Run] = {}  # senders to (re)consider at the end of the instant
        nl = len(program.loops)
        self.pc = [0] * n
        self.iters = [[0] * nl for _ in range(n)]
        self.finish = [math.nan] * n
        self.blocked_since = [0.0] * n
        # statistics (all extrapolated together)
        nc = len(program.collectives)
        self.compute = np.zeros(n)
        self.link_bytes = np.zeros(len(topology.links))
        self.coll_total = np.zeros(nc)
        self.coll_runs = np.zeros(nc)
        self.coll_wait = np.zeros(nc)
        self.coll_max = np.zeros(nc)
        self.extrapolated: dict[int, int] = {}
        # quiescent state key -> (time, parked times relative to it, statistics, loop iteration)
        self._seen: dict[tuple, tuple[float, tuple[float, ...], tuple[np.ndarray, ...], int]] = {}

    # --- static preparation ----------------------------------------------------------------
    def _roles(self, program: Program) -> None:
        nn = len(program.nodes)
        self.role = [_COMPUTE] * nn
        self.arg = [-1] * nn
        for c in program.collectives:
            if not (0 <= c.start < nn and 0 <= c.done < nn and c.start <= c.done):
                raise SimulationError(
                    f"collective {c.name!r} has start/done nodes {c.start}/{c.done} outside the "
                    f"program's {nn} nodes; rebuild the program graph")
            if c.start == c.done:
                self.role[c.start], self.arg[c.start] = _SYNC, c.index
            else:
                self.role[c.start], self.arg[c.start] = _START, c.index
                self.role[c.done], self.arg[c.done] = _DONE, c.index
        for lp in program.loops:
            if not (0 <= lp.start <= lp.end < nn):
                raise SimulationError(f"loop {lp.name!r} has body [{lp.start}, {lp.end}) outside the program")
            self.role[lp.end], self.arg[lp.end] = _LOOP, lp.index
        stray = [n.name for n in program.nodes
                 if n.kind in (NodeKind.COLLECTIVE, NodeKind.COLLECTIVE_START, NodeKind.COLLECTIVE_DONE)
                 and self.role[n.index] == _COMPUTE]
        if stray:
            self.warnings.append(f"{len(stray)} collective node(s) without a Collective record run as compute: "
                                 f"{', '.join(stray[:5])}")

    def _durations(self, program: Program, opaque_seconds: OpaqueSeconds) -> None:
        """Seconds of each compute node, and for each node the compute run up to the next yield."""
        hw = self.topology.hardware
        dur = [0.0] * len(program.nodes)
        uncosted = []
        for node in program.nodes:
            if self.role[node.index] != _COMPUTE:
                continue  # collective nodes cost what the network says; loop nodes nothing
            t = None
            if node.kind in (NodeKind.OPAQUE, NodeKind.UNKNOWN) and opaque_seconds is not None:
                t = opaque_seconds(node) if callable(opaque_seconds) else opaque_seconds.get(node.name)
            if t is None:
                t = node.compute_seconds(hw)
            if t < 0 or not math.isfinite(t):
                raise SimulationError(f"node {node.name!r} has a cost of {t} s; costs must be finite and >= 0")
            if t == 0 and node.kind in (NodeKind.OPAQUE, NodeKind.UNKNOWN):
                uncosted.append(node.name)
            dur[node.index] = t
        if uncosted:
            self.warnings.append(f"{len(uncosted)} opaque node(s) cost 0 s (pass opaque_seconds): "
                                 f"{', '.join(uncosted[:5])}")
        # segment[i] = (first yield node at or after i, compute seconds from i up to it)
        nn = len(program.nodes)
        self.seg_stop = [nn] * (nn + 1)
        self.seg_dur = [0.0] * (nn + 1)
        for i in range(nn - 1, -1, -1):
            if self.role[i] != _COMPUTE:
                self.seg_stop[i], self.seg_dur[i] = i, 0.0
            else:
                self.seg_stop[i], self.seg_dur[i] = self.seg_stop[i + 1], dur[i] + self.seg_dur[i + 1]

    def _trips(self, program: Program, default: int | None) -> list[int]:
        trips = []
        for lp in program.loops:
            if lp.trip_count is not None:
                if lp.trip_count < 1:
                    raise SimulationError(f"loop {lp.name!r} has trip count {lp.trip_count}")
                trips.append(lp.trip_count)
            elif default is not None:
                trips.append(default)
                self.warnings.append(f"loop {lp.name!r} has no known trip count; walked {default} time(s)")
            else:
                raise SimulationError(
                    f"loop {lp.name!r} has no known trip count; pass default_trip_count= to simulate it")
        return trips

    @staticmethod
    def _loop_chains(program: Program) -> list[tuple[int, ...]]:
        chains = []
        for lp in program.loops:
            chain: list[int] = []
            cur: int | None = lp.index
            seen: set[int] = set()
            while cur is not None and cur not in seen:
                seen.add(cur)
                chain.append(cur)
                cur = program.loops[cur].parent
            chains.append(tuple(reversed(chain)))
        return chains

    # --- events ----------------------------------------------------------------------------
    def _push(self, t: float, kind: int, a: Any, b: int) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, kind, a, b))

    def run(self) -> None:
        for d in range(self.n):
            self._push(0.0, _EV_DEVICE, None, d)
        heap, net = self.heap, self.net
        while True:
            t_ev = heap[0][0] if heap else math.inf
            dt = net.time_to_next_finish()
            t_next = min(self.now + dt, t_ev)
            if t_next == math.inf:
                break
            finished = net.advance(max(0.0, t_next - self.now), slack=TIME_EPS)
            self.now = max(self.now, t_next)
            # One batch per instant: everything within TIME_EPS of now happens "at once", and
            # senders choose their next transfer only after all of it, so float rounding of
            # coinciding times never decides who goes first.
            for fid in finished:
                self._tx_end(*self.flows.pop(fid))
            while True:
                while heap and heap[0][0] <= self.now + TIME_EPS:
                    _, _, kind, a, b = heapq.heappop(heap)
                    self.events += 1
                    if kind == _EV_DEVICE:
                        self._device(b)
                    elif kind == _EV_TX_END:
                        self._tx_end(a, b)
                    elif kind == _EV_LAUNCH:
                        self._launch(a, b)
                    else:
                        self._deliver(a, b)
                if not self._dirty:
                    break
                self._flush_senders()
                if not (heap and heap[0][0] <= self.now + TIME_EPS):
                    break
            if self._finished_in_instant:
                # runs that finished while a device was mid-walk (no traffic) are checked here,
                # once every device is parked again
                self._finished_in_instant = False
                if self.unfinished == 0 and self.extrapolate and not self.flows:
                    self._quiescent()
        stuck = [d for d in range(self.n) if math.isnan(self.finish[d])]
        if stuck:
            d = stuck[0]
            node = self.nodes[self.pc[d]] if self.pc[d] < len(self.nodes) else None
            raise SimulationError(
                f"{len(stuck)} device(s) never finished (deadlock): logical device {d} is blocked at "
                f"{node.name if node else 'end'!r}; a collective's members or its start/done loop context "
                f"do not match across devices")

    # --- devices ---------------------------------------------------------------------------
    def _device(self, d: int) -> None:
        """Device d is at node pc[d] at time now: walk until it blocks or parks at a later time."""
        nodes_n = len(self.nodes)
        while True:
            pc = self.pc[d]
            if pc >= nodes_n:
                self.finish[d] = self.now
                return
            role = self.role[pc]
            if role == _COMPUTE:
                stop, dur = self.seg_stop[pc], self.seg_dur[pc]
                self.compute[d] += dur
                self.pc[d] = stop
                self._push(self.now + dur, _EV_DEVICE, None, d)
                return
            if role == _START:
                self._issue(d, self.arg[pc])
                self.pc[d] = pc + 1
                continue
            if role == _SYNC or role == _DONE:
                run = self._issue(d, self.arg[pc]) if role == _SYNC else self._lookup(d, self.arg[pc])
                phys = self.l2p[d]
                if run is None or run.pending.get(phys, 0) == 0:
                    self.pc[d] = pc + 1
                    continue
                run.waiters[phys] = d
                self.blocked_since[d] = self.now
                return
            # loop node
            lp = self.arg[pc]
            it = self.iters[d]
            if it[lp] + 1 < self.trips[lp]:
                it[lp] += 1
                self.pc[d] = self.program.loops[lp].start
            else:
                it[lp] = 0
                self.pc[d] = pc + 1

    def _key(self, d: int, c: int) -> tuple:
        loop = self.nodes[self.program.collectives[c].start].loop
        if loop is None:
            return (c,)
        it = self.iters[d]
        return (c, *(it[l] for l in self.chain[loop]))

    def _lookup(self, d: int, c: int) -> _Run | None:
        run = self.runs.get(self._key(d, c))
        if run is None:
            raise SimulationError(
                f"device {d} waits for collective {self.program.collectives[c].name!r} it never issued "
                "in this loop iteration; its start and done must be in the same loop body")
        return run

    def _plan(self, c: int) -> TransferPlan:
        plan = self.plans.get(c)
        if plan is None:
            plan = build_plan(self.program.collectives[c], self.l2p, self.topology, ring_order=self.ring_order,
                              chunks=self.chunks, direction=self.ring_direction,
                              default_direction=self.default_direction)
            self.plans[c] = plan
        return plan

    def _issue(self, d: int, c: int) -> _Run:
        key = self._key(d, c)
        run = self.runs.get(key)
        if run is None:
            run = _Run(len(self.runs), self._plan(c), c)
            self.runs[key] = run
            self.unfinished += 1
        phys = self.l2p[d]
        plan = run.plan
        if phys in plan.involvement:  # else not a member (e.g. outside every permute pair)
            if run.first_issue is None:
                run.first_issue = self.now
            if self.launch > 0:
                self._push(self.now + self.launch, _EV_LAUNCH, run, phys)
            else:
                self._launch(run, phys)
        self._check_finished(run)
        return run

    def _launch(self, run: _Run, phys: int) -> None:
        """The device's part of the run is launched: its transfers may go once their peers' are too."""
        run.issued.add(phys)
        for t in run.plan.by_device[phys]:
            self._enable(run, t)
        self._check_finished(run)

    # --- transfers -------------------------------------------------------------------------
    def _enable(self, run: _Run, t: int) -> None:
        plan = run.plan
        if run.enabled[t] or run.missing[t] or plan.src[t] not in run.issued or plan.dst[t] not in run.issued:
            return
        run.enabled[t] = 1
        s = plan.sender[t]
        heapq.heappush(run.queues[s], (plan.seq[t], t))
        self._dirty[(run.serial, s)] = run

    def _flush_senders(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for (_, s), run in sorted(dirty.items(), key=lambda kv: kv[0]):
            self._send(run, s)

    def _send(self, run: _Run, s: int) -> None:
        if run.busy[s] or not run.queues[s]:
            return
        _, t = heapq.heappop(run.queues[s])
        run.busy[s] = 1
        plan = run.plan
        route = plan.route[t]
        if not route:
            self._push(self.now, _EV_TX_END, run, t)
            return
        self._flow_id += 1
        self.flows[self._flow_id] = (run, t)
        self.net.add(self._flow_id, route, plan.nbytes[t])
        nb = plan.nbytes[t]
        for l in route:
            self.link_bytes[l] += nb

    def _tx_end(self, run: _Run, t: int) -> None:
        plan = run.plan
        s = plan.sender[t]
        run.busy[s] = 0
        self._dirty[(run.serial, s)] = run
        self._push(self.now + len(plan.route[t]) * self.hop_latency, _EV_DELIVER, run, t)

    def _deliver(self, run: _Run, t: int) -> None:
        plan = run.plan
        run.left -= 1
        for dep in plan.dependents[t]:
            run.missing[dep] -= 1
            if run.missing[dep] == 0:
                self._enable(run, dep)
        for dev in {plan.src[t], plan.dst[t]}:
            run.pending[dev] -= 1
            if run.pending[dev] == 0 and dev in run.waiters:
                d = run.waiters.pop(dev)
                self.coll_wait[run.coll] += self.now - self.blocked_since[d]
                self.pc[d] += 1
                self._push(self.now, _EV_DEVICE, None, d)
        self._check_finished(run)

    def _check_finished(self, run: _Run) -> None:
        if run.finished or run.left or len(run.issued) < len(run.plan.members):
            return
        run.finished = True
        self.unfinished -= 1
        c = run.coll
        duration = self.now - (run.first_issue if run.first_issue is not None else self.now)
        self.coll_total[c] += duration
        self.coll_runs[c] += 1
        self.coll_max[c] = max(self.coll_max[c], duration)
        self._finished_in_instant = True
        if self.unfinished == 0 and self.extrapolate and not self.flows:
            self._quiescent()

    # --- loop extrapolation ----------------------------------------------------------------
    def _quiescent(self) -> None:
        """Record the state at a quiescent moment; skip iterations once it recurs (see module doc)."""
        loops = self.program.loops
        if not loops or any(k != _EV_DEVICE for _, _, k, _, _ in self.heap):
            return
        parked: dict[int, float] = {}
        for t, _, _, _, d in self.heap:
            parked[d] = t
        if len(parked) != self.n or any(self.pc[d] >= len(self.nodes) for d in range(self.n)):
            return
        for lp in loops:  # outermost first is not required: a loop qualifies if every device is in it
            if not all(lp.start <= self.pc[d] <= lp.end for d in range(self.n)):
                continue
            i = lp.index
            base = min(self.iters[d][i] for d in range(self.n))
            key = (i, tuple((self.pc[d], tuple(it if j != i else it - base for j, it in enumerate(self.iters[d])))
                            for d in range(self.n)))
            rel = tuple(parked[d] - self.now for d in range(self.n))
            stats = (self.compute.copy(), self.link_bytes.copy(), self.coll_total.copy(), self.coll_runs.copy(),
                     self.coll_wait.copy())
            prev = self._seen.get(key)
            self._seen[key] = (self.now, rel, stats, base)
            if prev is None:
                continue
            p_now, p_rel, p_stats, p_base = prev
            period = self.now - p_now
            if base != p_base + 1 or period <= 0:
                continue
            tol = 1e-9 * period + 1e-15
            if any(abs(a - b) > tol for a, b in zip(rel, p_rel, strict=True)):
                continue
            top = max(self.iters[d][i] for d in range(self.n))
            skip = self.trips[i] - 1 - top
            if skip <= 0:
                continue
            shift = skip * period
            self.heap[:] = [(t + shift, s, k, a, b) for t, s, k, a, b in self.heap]  # in place: run() holds it
            heapq.heapify(self.heap)
            self.now += shift
            for d in range(self.n):
                self.iters[d][i] += skip
            # a device parked between a start and its done finds the (finished) run under the
            # shifted iteration number
            for rkey, run in list(self.runs.items()):
                loop = self.nodes[self.program.collectives[rkey[0]].start].loop
                chain = self.chain[loop] if loop is not None else ()
                if i in chain and rkey[1 + chain.index(i)] >= base:
                    j = 1 + chain.index(i)
                    self.runs[rkey[:j] + (rkey[j] + skip,) + rkey[j + 1 :]] = run
            for cur, old in zip((self.compute, self.link_bytes, self.coll_total, self.coll_runs, self.coll_wait),
                                p_stats, strict=True):
                cur += skip * (cur - old)
            self.extrapolated[i] = self.extrapolated.get(i, 0) + skip
            self._seen.clear()
            return

    # --- output ----------------------------------------------------------------------------
    def result(self, options: dict[str, Any]) -> SimResult:
        step = max(self.finish) if self.n else 0.0
        compute = float(self.compute.max()) if self.n else 0.0
        timings = []
        for c in self.program.collectives:
            runs = int(round(self.coll_runs[c.index]))
            plan = self.plans.get(c.index)
            members = len(plan.members) if plan and plan.members else 1
            timings.append(CollectiveTiming(
                index=c.index, name=c.name, kind=c.kind.value, mode=c.mode.value, runs=runs,
                total_seconds=float(self.coll_total[c.index]),
                mean_seconds=float(self.coll_total[c.index] / runs) if runs else 0.0,
                max_seconds=float(self.coll_max[c.index]),
                wait_seconds=float(self.coll_wait[c.index] / members),
                algorithm=plan.description if plan else "not run"))
        return SimResult(
            step_seconds=float(step), compute_seconds=compute,
            exposed_comm_seconds=max(0.0, float(step) - compute), collectives=tuple(timings),
            link_bytes=self.link_bytes.copy(),
            device_finish_seconds={self.l2p[d]: float(self.finish[d]) for d in range(self.n)},
            loops_extrapolated=dict(self.extrapolated), events=self.events, rate_solves=self.net.solves,
            warnings=tuple(self.warnings), options=options)


def ring_switches(ring_order: RingOrder | str, ring_direction: RingDirection | str | None,
                  default_direction: RingDirection | str) -> tuple[RingOrder, RingDirection | None, RingDirection]:
    """The simulator's ring switches as the enums it shares with Q2 (``"auto"`` or None: no forced
    direction); SimulationError on a value outside them."""
    if ring_order not in tuple(RingOrder):
        raise SimulationError(f"ring_order must be 'listed', 'best' or 'reordering-map', not {ring_order!r}")
    if ring_direction not in ("auto", None, *RingDirection):
        raise SimulationError(f"ring_direction must be 'auto', 'unidirectional' or 'bidirectional', "
                              f"not {ring_direction!r}")
    if default_direction not in tuple(RingDirection):
        raise SimulationError("default_direction must be 'unidirectional' or 'bidirectional'")
    forced = None if ring_direction is None or ring_direction == "auto" else RingDirection(ring_direction)
    return RingOrder(ring_order), forced, RingDirection(default_direction)


def _validate(program: Program, topology: Topology, placement: Placement, chunks: int) -> None:
    """Reject inputs that would make the simulation meaningless, with a message saying what to do."""
    if not isinstance(chunks, int) or chunks < 1:
        raise SimulationError(f"chunks must be a positive integer, not {chunks!r}")
    try:
        placement.check(topology)
    except PlacementError as exc:
        raise SimulationError(f"placement {placement.name!r} does not match topology {topology.name}: {exc}") from exc
    size = placement.device_ids.size
    n = program.num_devices
    if n > size:
        raise SimulationError(
            f"program {program.module_name!r} runs on {n} devices but placement {placement.name!r} places "
            f"only {size}; compile the program for this mesh or pick a placement of {n} devices")
    for c in program.collectives:
        ids = [i for g in c.groups for i in g] + [i for p in c.source_target_pairs for i in p]
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise SimulationError(
                f"collective {c.name!r} names logical device {bad[0]}, outside the program's {n} devices")
        seen: set[int] = set()
        for g in c.groups:
            if seen & set(g) or len(set(g)) != len(g):
                raise SimulationError(f"collective {c.name!r} lists a device in more than one group slot")
            seen |= set(g)
