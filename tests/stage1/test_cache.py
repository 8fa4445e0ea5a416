"""The Stage 1 cache: a second run over the same space and slice lowers nothing and ranks the same."""

import json

import pytest

import aoizora.stage1.search as search
from aoizora.stage1 import Stage1Cache, run_stage1
from aoizora.stage1.search import KEPT, OUT_OF_MEMORY, RANKED
from aoizora.workloads import TransformerSpace


def _lowerings(monkeypatch) -> list[str]:
    """Record every strategy Stage 1 lowers (in this process; the tests run without workers)."""
    calls: list[str] = []
    real = search.analyse

    def counted(space, strategy, topology, **kwargs):
        calls.append(space.describe(strategy))
        return real(space, strategy, topology, **kwargs)

    monkeypatch.setattr(search, "analyse", counted)
    return calls


def _outcome(result) -> list[tuple]:
    return [(e.key, e.verdict, e.reasons, e.rank, e.q1, e.memory, e.summary) for e in result.entries]


def test_a_second_run_reads_every_analysis_back(topo_2x4, tmp_path, monkeypatch):
    from small_transformer import SMALL

    space = TransformerSpace(SMALL)
    cache = Stage1Cache(tmp_path)
    lowered = _lowerings(monkeypatch)
    first = run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache)
    n_first = len(lowered)
    assert n_first == first.count(RANKED, KEPT, OUT_OF_MEMORY) > 3
    # another Top-K: the same analyses, read back (nothing lowered), ranked again
    second = run_stage1(space, topo_2x4, top_k=5, progress=False, workers=1, cache=cache)
    assert len(lowered) == n_first
    assert second.cached == n_first and second.timings["lower"] == 0.0
    assert [(e.key, e.reasons, e.rank, e.q1, e.memory, e.summary) for e in second.entries] == [
        (e.key, e.reasons, e.rank, e.q1, e.memory, e.summary) for e in first.entries]
    assert [e.verdict for e in second.entries] == [
        KEPT if e.rank is not None and e.rank <= 5 else (RANKED if e.verdict == KEPT else e.verdict)
        for e in first.entries]
    assert second.count(KEPT) == 5


def test_another_slice_or_setting_is_not_answered_from_the_cache(topo_2x4, tmp_path, monkeypatch):
    from small_transformer import SMALL

    from aoizora.topology import get_topology

    space = TransformerSpace(SMALL)
    cache = Stage1Cache(tmp_path)
    lowered = _lowerings(monkeypatch)
    run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache)
    n = len(lowered)
    run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache, overlap="none")
    assert len(lowered) == 2 * n  # the overlap rule changes Q1: analysed again
    other = get_topology("v6e:2x4")
    run_stage1(space, other, top_k=3, progress=False, workers=1, cache=cache)
    assert len(lowered) > 2 * n


def test_keep_predictions_bypasses_the_cache(topo_2x4, tmp_path, monkeypatch):
    from small_transformer import SMALL

    space = TransformerSpace(SMALL)
    cache = Stage1Cache(tmp_path)
    run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache)
    lowered = _lowerings(monkeypatch)
    result = run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache, keep_predictions=True)
    assert lowered and all(e.prediction is not None for e in result.ranked)


@pytest.mark.parametrize("damage", ["truncate", "checksum", "other-key", "nan"])
def test_a_damaged_entry_is_discarded_and_analysed_again(topo_2x4, tmp_path, monkeypatch, damage, caplog):
    from small_transformer import SMALL

    space = TransformerSpace(SMALL)
    cache = Stage1Cache(tmp_path)
    first = run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache)
    (path,) = tmp_path.glob("*.json")
    entry = json.loads(path.read_text())
    if damage == "truncate":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif damage == "checksum":
        first_key = next(iter(entry["analyses"]))
        entry["analyses"][first_key]["q1"]["seconds"] *= 0.5  # a lower bound that was never computed
        path.write_text(json.dumps(entry))
    elif damage == "other-key":
        entry["key"] = "0" * 32
        path.write_text(json.dumps(entry))
    else:
        path.write_text(path.read_text().replace('"seconds": ', '"seconds": NaN, "x": ', 1))
    lowered = _lowerings(monkeypatch)
    again = run_stage1(space, topo_2x4, top_k=3, progress=False, workers=1, cache=cache)
    assert len(lowered) == first.count(RANKED, KEPT, OUT_OF_MEMORY)
    assert _outcome(again) == _outcome(first)
    assert "discarded Stage 1 cache entry" in caplog.text
