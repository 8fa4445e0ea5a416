"""Hand-built single-collective programs for textbook checks of the cost model."""

from __future__ import annotations

from aoizora.hlo.program import Collective, CollectiveKind, CollectiveMode, Node, NodeKind, Program
from aoizora.hlo.shapes import Shape


def one_collective(
    kind: CollectiveKind,
    groups: list[tuple[int, ...]],
    operand_bytes: int,
    num_devices: int,
    *,
    pairs: tuple[tuple[int, int], ...] = (),
    compute_flops: float = 0.0,
    mode: CollectiveMode = CollectiveMode.SYNC,
) -> Program:
    """A program that runs one collective, optionally beside (async) or after (sync) one compute op."""
    shape = Shape("bf16", (operand_bytes // 2,))
    nodes: list[Node] = []
    coll_kind = NodeKind.COLLECTIVE if mode == CollectiveMode.SYNC else NodeKind.COLLECTIVE_START
    nodes.append(Node(0, "coll", kind.value, coll_kind, "main", shape, (shape,), (), 1, None, collective=0))
    overlap: tuple[int, ...] = ()
    if compute_flops:
        nodes.append(Node(1, "work", "fusion", NodeKind.COMPUTE, "main", shape, (), (), 1, None, flops=compute_flops))
        overlap = (1,) if mode != CollectiveMode.SYNC else ()
    done = 0
    if mode != CollectiveMode.SYNC:
        done = len(nodes)
        nodes.append(Node(done, "coll-done", kind.value, NodeKind.COLLECTIVE_DONE, "main", shape, (shape,), (0,), 1, None, collective=0))
    size = len(groups[0]) if groups else 2
    coll = Collective(
        index=0, name="coll", kind=kind, mode=mode, start=0, done=done, groups=tuple(groups),
        source_target_pairs=pairs, dtype="bf16", operand_bytes=operand_bytes, result_bytes=operand_bytes,
        payload_bytes=operand_bytes, send_bytes=operand_bytes, recv_bytes=operand_bytes, group_size=size,
        multiplicity=1, loop=None, channel_id=1, dimensions=(0,), algorithm=None, overlap=overlap,
    )
    return Program("synthetic", num_devices, 1, nodes, [coll], [])
