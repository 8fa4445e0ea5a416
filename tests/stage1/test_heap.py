"""libtpu packs temporaries best fit, in the order they are born; Stage 1 packs its own the same way."""

import pytest
from assignment_dump import buffer_assignment_of

from aoizora.errors import BufferDumpError
from aoizora.hlo.buffer_dump import read_buffer_assignment
from aoizora.models.registry import wan_space
from aoizora.stage1.heap import Timeline
from aoizora.topology import get_topology
from aoizora.workload import lowering_inputs_on


def _timeline(buffers):
    tl = Timeline()
    for start, end, size in buffers:
        h = tl.open(size, start=start)
        tl.ends[h] = end
    return tl


def test_a_buffer_born_into_a_fragmented_heap_goes_on_top():
    # A (60) and B (50) are born together, A dies, then C (100) is born: A's 60-byte hole is too
    # small, so C goes above B. Live peak 150; a best fit by decreasing size would reach it.
    tl = _timeline([(0, 1, 60), (0, 3, 50), (2, 3, 100)])
    assert tl.live_peak() == 150
    assert tl.packed_bytes() == 210
    assert tl.peak_tick() == 2 and tl.live_at(2) == [1, 2]  # B and C: what the peak is made of


def test_best_fit_takes_the_smallest_hole_that_fits():
    # holes of 100 (A dies) and 40 (C dies) beside B and D; E (40) takes the 40 hole, F (100) the other
    tl = _timeline([(0, 1, 100), (0, 5, 10), (0, 1, 40), (0, 5, 10), (2, 5, 40), (2, 5, 100)])
    assert tl.packed_bytes() == 160  # no growth: both fit their holes
    assert tl.live_peak() == 160


def test_outside_buffers_are_not_packed():
    tl = Timeline()
    tl.open(100, outside=True)
    tl.open(10)
    assert tl.packed_bytes() == 10
    assert tl.live_peak(outside=True) == 100


def _replayed_program():
    topo = get_topology("v5e:2x2")
    space = wan_space("wan2.1-t2v-1.3b", "480p", 21, generation=None, rope_partner="reshape",
                      splash_cost_estimate=False)
    strategy = next(c.strategy for c in space.candidates(4) if c.key == "context=4 | weights=gathered | attn=allgather")
    return lowering_inputs_on(space, strategy, topo).lower()


@pytest.mark.slow
def test_replaying_libtpu_live_ranges_gives_its_temp_allocation(tmp_path):
    """The packing rule, on the compiler's own buffers: libtpu's dumped live ranges, packed best
    fit in birth order, take the temp allocation libtpu made for them - here 1.6x their live peak
    (Wan 1.3B, 480p/21f, v5e:2x2, all-gather attention over context=4, the rotary embedding's
    reshape form: its relayout buffers are what make packing costly; the matmul form's program
    packs within 1.2x of its live peak, which would not tell packing from a live-peak count).
    The splash calls carry no cost estimate here: with one, libtpu schedules this program
    otherwise and its temp allocation (184.8 MB) is 1.69x its own live ranges packed this way
    (109.3 MB), which this rule does not describe (an open gap, `docs/results/maxdiffusion.md`, "The forms
    aoizora's program takes from MaxDiffusion's").
    The compile stops once libtpu has written the assignment: its back end adds nothing read here."""
    assignment = buffer_assignment_of(_replayed_program, tmp_path)
    replay = _timeline([(b.start, b.end, b.size) for b in assignment.temp_buffers])
    assert replay.live_peak() < 0.7 * assignment.temp_bytes  # packing costs a lot here
    assert replay.packed_bytes() == pytest.approx(assignment.temp_bytes, rel=0.02)
    assert assignment.parameter_bytes > 0 and assignment.checked_bytes > assignment.temp_bytes


def test_a_directory_without_a_dump_is_a_clear_error(tmp_path):
    with pytest.raises(BufferDumpError, match="xla_dump_to"):
        read_buffer_assignment(tmp_path)
