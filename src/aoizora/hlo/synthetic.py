"""Hand-built `Program`s for tests and benchmarks of the cost model and the simulator.

The compiled-HLO parser builds Programs from libtpu output; textbook checks of Q2 and of the
simulator must not depend on it (nor on a compile), so `ProgramBuilder` writes the same model
directly: nodes in schedule order, collectives with their start/done nodes, loops with their
body ranges.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from aoizora.hlo.program import (
    AlgorithmConfig,
    Collective,
    CollectiveKind,
    CollectiveMode,
    Loop,
    Node,
    NodeKind,
    Program,
)
from aoizora.hlo.shapes import Shape

_SCALAR = Shape("f32", ())


def algorithm(emitter: str | None, strategy: str | None = None, *, colors: int | None = None,
              debug: str = "", has_reordering_map: bool | None = None) -> AlgorithmConfig:
    """An `AlgorithmConfig` as the parser would build it from a ``collective_algorithm_config``."""
    return AlgorithmConfig(
        emitter=emitter, strategy=strategy, strategies=(strategy,) if strategy else (), colors=colors,
        phases=None, has_reordering_map=has_reordering_map, is_multistep=None, fields={},
        raw={"emitter": emitter, "strategy": strategy, "debug": debug})


PINCER = algorithm("RotatedPincerEmitter", "UniDirection1DRingStrategy", colors=2)
UNI_RING = algorithm("SingleInputAllReduceScatterFusion", "StrategyRing", colors=1)


class ProgramBuilder:
    """Append nodes in schedule order; `build` returns the `Program`."""

    def __init__(self, num_devices: int, name: str = "test"):
        self.num_devices = num_devices
        self.name = name
        self.nodes: list[Node] = []
        self.collectives: list[Collective] = []
        self.loops: list[Loop] = []
        self._loop_stack: list[tuple[int, int]] = []  # (loop index placeholder, trip)

    # --- nodes -------------------------------------------------------------------------------
    def _loop(self) -> tuple[int | None, int]:
        mult = 1
        for _, trip in self._loop_stack:
            mult *= trip
        return (self._loop_stack[-1][0] if self._loop_stack else None), mult

    def _node(self, name: str, kind: NodeKind, opcode: str, **costs) -> int:
        loop, mult = self._loop()
        idx = len(self.nodes)
        deps = (idx - 1,) if idx else ()
        self.nodes.append(Node(index=idx, name=name, opcode=opcode, kind=kind, computation="main", shape=_SCALAR,
                               operand_shapes=(), deps=deps, multiplicity=mult, loop=loop, **costs))
        return idx

    def compute(self, seconds: float | None = None, *, flops: float = 0.0, hbm_bytes: int = 0,
                cycles: int | None = None, name: str | None = None, opaque: bool = False) -> int:
        """A compute (or opaque) node with the given cost."""
        kind = NodeKind.OPAQUE if opaque else NodeKind.COMPUTE
        return self._node(name or f"op.{len(self.nodes)}", kind, "custom-call" if opaque else "fusion",
                          flops=flops, hbm_bytes=hbm_bytes, estimated_cycles=cycles, seconds=seconds)

    def _collective(self, kind: CollectiveKind, mode: CollectiveMode, start: int, done: int,
                    groups: Sequence[Sequence[int]], payload_bytes: int, algo: AlgorithmConfig | None,
                    pairs: Sequence[tuple[int, int]]) -> int:
        loop, mult = self._loop()
        ci = len(self.collectives)
        groups_t = tuple(tuple(g) for g in groups)
        n = len(groups_t[0]) if groups_t else 2
        gathered = kind in (CollectiveKind.ALL_GATHER, CollectiveKind.ALL_TO_ALL)
        self.collectives.append(Collective(
            index=ci, name=f"{kind.value}.{ci}", kind=kind, mode=mode, start=start, done=done, groups=groups_t,
            source_target_pairs=tuple((a, b) for a, b in pairs), dtype="bf16", operand_bytes=payload_bytes,
            result_bytes=payload_bytes * (n if kind is CollectiveKind.ALL_GATHER else 1), payload_bytes=payload_bytes,
            send_bytes=payload_bytes, recv_bytes=payload_bytes, group_size=n, multiplicity=mult, loop=loop,
            channel_id=ci + 1, dimensions=(0,), algorithm=algo, array_bytes=payload_bytes * (n if gathered else 1)))
        for i in {start, done}:
            self.nodes[i].collective = ci
        return ci

    def collective(self, kind: CollectiveKind | str, groups: Sequence[Sequence[int]] = (), payload_bytes: int = 0,
                   *, algo: AlgorithmConfig | None = None, pairs: Sequence[tuple[int, int]] = ()) -> int:
        """A synchronous collective (one node); returns the collective index."""
        kind = CollectiveKind(kind)
        node = self._node(f"{kind.value}.n{len(self.nodes)}", NodeKind.COLLECTIVE, kind.value)
        return self._collective(kind, CollectiveMode.SYNC, node, node, groups, payload_bytes, algo, pairs)

    def start(self, kind: CollectiveKind | str, groups: Sequence[Sequence[int]] = (), payload_bytes: int = 0,
              *, algo: AlgorithmConfig | None = None, pairs: Sequence[tuple[int, int]] = ()) -> int:
        """The start of an async collective; close it with `done`. Returns the collective index."""
        kind = CollectiveKind(kind)
        node = self._node(f"{kind.value}-start.n{len(self.nodes)}", NodeKind.COLLECTIVE_START, f"{kind.value}-start")
        # done is patched in by `done`
        return self._collective(kind, CollectiveMode.ASYNC, node, node, groups, payload_bytes, algo, pairs)

    def done(self, collective: int) -> int:
        """The done node of an async collective started with `start`."""
        c = self.collectives[collective]
        node = self._node(f"{c.kind.value}-done.n{len(self.nodes)}", NodeKind.COLLECTIVE_DONE, f"{c.kind.value}-done")
        c.done = node
        self.nodes[node].collective = collective
        c.overlap = tuple(i for i in range(c.start + 1, node)
                          if self.nodes[i].kind in (NodeKind.COMPUTE, NodeKind.OPAQUE))
        return node

    @contextlib.contextmanager
    def loop(self, trip_count: int) -> Iterator[int]:
        """Nodes appended inside the block form one loop body, walked `trip_count` times."""
        idx = len(self.loops)
        parent = self._loop_stack[-1][0] if self._loop_stack else None
        start = len(self.nodes)
        self.loops.append(Loop(index=idx, name=f"while.{idx}", trip_count=trip_count,
                               trip_count_source="backend_config", start=start, end=-1, parent=parent,
                               multiplicity=0))
        self._loop_stack.append((idx, trip_count))
        try:
            yield idx
        finally:
            _, mult = self._loop()
            self._loop_stack.pop()
            end = self._node(f"while.{idx}", NodeKind.LOOP, "while")
            self.loops[idx].end = end
            self.loops[idx].multiplicity = mult

    def build(self) -> Program:
        open_ = [c.name for c in self.collectives if c.mode is CollectiveMode.ASYNC and c.start == c.done]
        if open_:
            raise ValueError(f"async collectives without done: {open_}")
        return Program(module_name=self.name, num_partitions=self.num_devices, replica_count=1, nodes=self.nodes,
                       collectives=self.collectives, loops=self.loops)
