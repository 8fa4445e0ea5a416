"""Choosing the slice: `aoizora compare` plans one Wan video on several slices and gives, per slice, the
video time, videos per hour, chip-hours and cost per video, and the cheapest slice within a latency target.

`aoizora.slice_costs` holds the arithmetic and `aoizora.plan_video` the one reading of a plan's video
time (both below the planner, so the throughput planner shares them); `prices` the dated price file,
`comparison` the planning of each slice. Importing the package loads no jax (the CLI starts fast).
"""

from aoizora.compare.comparison import Comparison, SliceRow, compare_wan, parse_slices, slice_row
from aoizora.compare.prices import ChipPrice, PriceTable, default_prices, load_prices
from aoizora.plan_video import MIXED, video_seconds, video_time_includes
from aoizora.slice_costs import Pick, SliceCandidate, pick_cheapest

__all__ = [
    "MIXED", "ChipPrice", "Comparison", "Pick", "PriceTable", "SliceCandidate", "SliceRow", "compare_wan",
    "default_prices", "load_prices", "parse_slices", "pick_cheapest", "slice_row", "video_seconds",
    "video_time_includes",
]
