import json
import subprocess
import sys

import pytest

from aoizora.cost import Q2Options
from aoizora.evaluation.validation import PairScore, compare_scores
from aoizora.evaluation.validation.programs import collective_microprograms
from aoizora.evaluation.validation.rank import rank_placements, validate
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.topology import get_topology


def test_compare_scores_statistics():
    pairs = [PairScore("a", f"p{i}", q, r) for i, (q, r) in enumerate([(1, 10), (2, 20), (3, 30), (4, 25)])]
    rep = compare_scores(pairs)
    assert rep.spearman == pytest.approx(0.8)
    assert rep.per_program["a"]["top1"] == 1.0 and rep.per_program["a"]["regret"] == 0.0
    worse = compare_scores([PairScore("b", "x", 1, 30), PairScore("b", "y", 2, 10)])
    assert worse.per_program["b"]["top1"] == 0.0
    assert worse.per_program["b"]["regret"] == pytest.approx(2.0)  # chose 30 where 10 was possible
    assert worse.spearman == pytest.approx(-1.0)


@pytest.fixture(scope="module")
def micro_2x4():
    topo = get_topology("v5e:2x4")
    spec = MeshSpec.parse("dp=2,sp=2,tp=2")
    return topo, spec, list(collective_microprograms(topo, spec))


def test_q2_ranks_3_axis_placements_like_the_simulator(micro_2x4):
    topo, spec, programs = micro_2x4
    placements = enumerate_placements(topo, spec).placements
    report = validate(programs, topo, placements, options=Q2Options(ring_order="listed"))
    assert report.spearman >= 0.95
    assert report.top1_agreement == 1.0
    assert report.max_regret < 0.01


def test_rank_marks_jax_default_and_sorts_by_q2(micro_2x4):
    topo, spec, programs = micro_2x4
    placements = enumerate_placements(topo, spec).placements
    rows = rank_placements(programs[0].program, topo, placements, simulate=False)
    assert sum(r.is_jax_default for r in rows) == 1
    q2 = [r.q2.step_seconds for r in rows]
    assert q2 == sorted(q2)
    assert all(r.sim is None for r in rows)


def _cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-c", "from aoizora.cli import main; main()", *args],
        capture_output=True, text=True, timeout=600, input=stdin,
    )


@pytest.fixture(scope="module")
def allreduce_hlo(tmp_path_factory):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from aoizora.placement import jax_default_placement

    topo = get_topology("v5e:2x4")
    mesh = jax_default_placement(topo, MeshSpec.parse("sp=2,tp=4")).jax_mesh(topo)
    x = jax.ShapeDtypeStruct((1024, 8192), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "tp")))
    w = jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P("tp", None)))
    text = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(mesh, P())).lower(x, w).compile().as_text()
    path = tmp_path_factory.mktemp("hlo") / "matmul.hlo"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_rank_cli_json(allreduce_hlo):
    out = _cli("rank", "--hlo", str(allreduce_hlo), "--topology", "v5e:2x4", "--mesh", "sp=2,tp=4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = data["placements"]
    assert sum(r["jax_default"] for r in rows) == 1
    assert [r["q2_seconds"] for r in rows] == sorted(r["q2_seconds"] for r in rows)
    assert all(r["sim_seconds"] > 0 for r in rows)
    # the tp all-reduce is faster on a 2x2 square than on the jax-default tray order
    best, default = rows[0], next(r for r in rows if r["jax_default"])
    assert best["sim_seconds"] < default["sim_seconds"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--topology", "v5e:2x2", "--mesh", "a=4"), "compiled for 8 devices"),
        (("--topology", "v5e:2x4", "--mesh", "a=3"), "multiply to 8"),
    ],
)
def test_rank_cli_bad_input(allreduce_hlo, args, fragment):
    out = _cli("rank", "--hlo", str(allreduce_hlo), *args)
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and fragment in lines[0], out.stderr


@pytest.mark.slow
def test_rank_cli_rejects_non_hlo(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0\n")
    out = _cli("rank", "--hlo", str(bad), "--topology", "v5e:2x4", "--mesh", "a=8")
    assert out.returncode == 2
    assert "line" in out.stderr and "Traceback" not in out.stderr
