"""Compiled-HLO analyzer: parse libtpu's HLO text into a loop-aware program graph.

See `aoizora.hlo.program` for the model the cost model and the simulator consume.
"""
