"""The HBM model fed with value events by hand: no lowering, no propagator."""

import pytest

from aoizora.stage1.events import CollectiveIssued, OpFinished, OpStarted, RegionEntered, RegionLeft, Value
from aoizora.stage1.hbm import HbmModel
from aoizora.stage1.ir import ExplicitCollective, Op, Region, TensorType


def _t(*shape: int) -> TensorType:
    return TensorType(shape, "f32")


def _op(name: str, operands: tuple, results: tuple, operand_types: tuple, result_types: tuple, **attrs) -> Op:
    return Op(name, operands, results, operand_types, result_types, attrs)


def _walk(region: Region, args: tuple[Value, ...], steps: list[tuple[Op, tuple, list, tuple]]) -> HbmModel:
    """Feed one region: (op, operand values, collectives issued, result values) per op."""
    model = HbmModel({})
    model.feed(RegionEntered(region, args))
    for op, operands, collectives, results in steps:
        model.feed(OpStarted(op, operands))
        for c in collectives:
            model.feed(c)
        model.feed(OpFinished(op, results))
    model.feed(RegionLeft(returned=True))
    return model


def test_a_fused_value_keeps_its_input_live_until_its_consumer_and_scratch_is_outside():
    """x @ w (400 B) -> tanh (fused) -> reduce (40 B, with a 40 B all-reduce of a reshard).

    The tanh owns no buffer, so the product stays live until the reduce reads it: the heap holds
    400 + 40 at the reduce. The all-reduce's scratch is outside the assignment: in the temp
    memory_analysis() reports (480), not in the packed heap."""
    x, w, prod, act, red = 0, 1, 2, 3, 4
    dot = _op("stablehlo.dot_general", (x, w), (prod,), (_t(10, 5), _t(5, 10)), (_t(10, 10),),
              lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
    tanh = _op("stablehlo.tanh", (prod,), (act,), (_t(10, 10),), (_t(10, 10),))
    reduce = _op("stablehlo.reduce", (act,), (red,), (_t(10, 10),), (_t(10),), dimensions=(1,))
    ret = _op("func.return", (red,), (), (_t(10),), ())
    region = Region((x, w), (_t(10, 5), _t(5, 10)), [dot, tanh, reduce, ret])
    model = _walk(region, (Value(x, 200.0, True), Value(w, 200.0, True)), [
        (dot, (Value(x, 200.0, True), Value(w, 200.0, True)), [], (Value(prod, 400.0),)),
        (tanh, (Value(prod, 400.0),), [], (Value(act, 400.0),)),
        (reduce, (Value(act, 400.0),), [CollectiveIssued("all-reduce", 40.0, 40.0, "reshard")], (Value(red, 40.0),)),
    ])
    report = model.report()
    assert report.outside_bytes == 40.0
    assert report.peak_temp_bytes == 400.0 + 40.0 + 40.0
    assert report.live_peak_temp_bytes == 480.0
    tl = model.timeline
    product = tl.labels.index(f"stablehlo.dot_general {_t(10, 10)}")
    assert (tl.starts[product], tl.ends[product]) == (1, 3)  # from the dot's tick to the reduce's


@pytest.mark.parametrize("prefetchable, outside", [(False, 200.0), (True, 0.0)])
def test_an_all_gather_of_a_computed_value_holds_an_outside_copy(prefetchable, outside):
    """An all-gather written in the program (100 B -> 200 B) then a reduce (8 B): libtpu runs the
    gather of an activation as an async collective fusion, with a second copy of its result
    outside the assignment; a gather of a parameter has none."""
    a, gathered, red = 0, 1, 2
    gather = _op("stablehlo.all_gather", (a,), (gathered,), (_t(5, 5),), (_t(10, 5),),
                 collective=ExplicitCollective("all-gather", ((0, 1),), (), 0))
    reduce = _op("stablehlo.reduce", (gathered,), (red,), (_t(10, 5),), (_t(2),), dimensions=(1,))
    ret = _op("func.return", (red,), (), (_t(2),), ())
    region = Region((a,), (_t(5, 5),), [gather, reduce, ret])
    arg = Value(a, 100.0, prefetchable)
    model = _walk(region, (arg,), [
        (gather, (arg,), [CollectiveIssued("all-gather", 100.0, 200.0, "written")], (Value(gathered, 200.0),)),
        (reduce, (Value(gathered, 200.0),), [], (Value(red, 8.0),)),
    ])
    report = model.report()
    # the gathered buffer (200) is live until the reduce, whose 8 B result goes on top of it
    assert report.outside_bytes == outside
    assert report.peak_temp_bytes == 208.0 + outside


def test_an_op_that_finishes_without_starting_is_refused():
    from aoizora.stage1.hbm import EventStreamError

    tanh = _op("stablehlo.tanh", (0,), (1,), (_t(4),), (_t(4),))
    model = HbmModel({})
    with pytest.raises(EventStreamError):
        model.feed(OpFinished(tanh, (Value(1, 16.0),)))
    model.feed(RegionEntered(Region((0,), (_t(4),), [tanh]), (Value(0, 16.0),)))
    with pytest.raises(EventStreamError):
        model.feed(OpFinished(tanh, (Value(1, 16.0),)))


def _stage1_imports(module: str) -> set[str]:
    import ast
    import importlib.util

    tree = ast.parse(open(importlib.util.find_spec(f"aoizora.stage1.{module}").origin).read())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return {n.removeprefix("aoizora.stage1.") for n in names if n.startswith("aoizora.stage1.")}


def test_the_propagator_and_the_memory_model_share_only_the_events():
    memory_side = {"hbm", "fusion", "heap", "memory"}
    sharding_side = {"propagate", "op_rules", "hints", "shardings"}
    for module in sharding_side | {"events"}:
        assert not _stage1_imports(module) & memory_side, module
    for module in memory_side:
        assert not _stage1_imports(module) & sharding_side, module
