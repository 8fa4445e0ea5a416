"""Progress reporting: a line every so often where a bar cannot redraw, nothing for short steps."""

from __future__ import annotations

import io

from rich.console import Console

from aoizora.progress import _LineCounter, progress_reporter


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=120), out


def test_off_a_terminal_each_interval_prints_the_count_so_far():
    console, out = _console(terminal=False)
    with progress_reporter("compile + simulate (v6e:4x4)", 3, console=console, every_s=0.0) as bar:
        bar.advance()
        bar.add_to_total(2)
        bar.advance()
    lines = out.getvalue().splitlines()
    assert [line.rsplit(" (", 1)[0] for line in lines] == ["compile + simulate (v6e:4x4): 1/3",
                                                           "compile + simulate (v6e:4x4): 2/5"]
    assert all(line.endswith(" s)") for line in lines)


def test_lines_come_at_most_once_per_interval_and_the_last_count_is_printed():
    console, out = _console(terminal=False)
    now = [0.0]
    lines = _LineCounter(console, "oracle", 10, every_s=60.0, clock=lambda: now[0])
    for t in (10, 59, 61, 70, 100, 125, 130):
        now[0] = t
        lines.advance()
    lines.finish()
    assert out.getvalue().splitlines() == ["oracle: 3/10 (61 s)", "oracle: 6/10 (125 s)", "oracle: 7/10 (130 s)"]


def test_off_a_terminal_a_step_shorter_than_the_interval_prints_nothing():
    console, out = _console(terminal=False)
    with progress_reporter("Stage 1", 100, console=console, every_s=3600.0) as bar:
        for _ in range(100):
            bar.advance()
    assert out.getvalue() == ""


def test_quiet_prints_nothing_anywhere():
    for terminal in (False, True):
        console, out = _console(terminal)
        with progress_reporter("Stage 1", 2, console=console, quiet=True, every_s=0.0) as bar:
            bar.advance()
            bar.add_to_total()
        assert out.getvalue() == ""


def test_on_a_terminal_the_bar_counts_and_leaves_no_line():
    console, out = _console(terminal=True)
    with progress_reporter("scoring placements", 2, console=console, every_s=0.0) as bar:
        bar.add_to_total()
        task = bar._bar.tasks[0]
        for _ in range(3):
            bar.advance()
        assert (task.completed, task.total) == (3, 3)
    assert "scoring placements: " not in out.getvalue()


def test_the_time_left_is_the_pace_so_far_times_what_is_left():
    from aoizora.progress import estimate_remaining, remaining_text

    assert estimate_remaining(30.0, 0, 4) is None
    assert estimate_remaining(30.0, 1, 4) == 90.0
    assert estimate_remaining(30.0, 3, 2) == 0.0
    assert remaining_text(None) == "estimating time left"
    assert remaining_text(90.0) == "about 90 s left"
    assert remaining_text(300.0) == "about 5.0 min left"


def test_off_a_terminal_the_lines_say_the_time_left():
    console, out = _console(terminal=False)
    now = [0.0]
    lines = _LineCounter(console, "Stage 2", 4, every_s=60.0, clock=lambda: now[0])
    now[0] = 70.0
    lines.set_remaining(210.0)
    lines.advance()
    now[0] = 280.0
    lines.set_remaining(None)
    lines.add_to_total(0)
    lines.advance()
    assert out.getvalue().splitlines() == ["Stage 2: 1/4 (70 s, about 3.5 min left)",
                                           "Stage 2: 2/4 (280 s, estimating time left)"]


def test_on_a_terminal_the_bar_shows_compiles_done_and_the_time_left():
    console, out = _console(terminal=True)
    with progress_reporter("Stage 2: compile and score", 4, console=console) as bar:
        bar.advance()
        bar.set_remaining(42.0)
        console.file.flush()
        bar.advance()
    text = out.getvalue()
    assert "about 42 s left" in text and "/4" in text
