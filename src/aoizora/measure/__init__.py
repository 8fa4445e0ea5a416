"""Timing plans and their parts on the TPU chips present (`aoizora measure`).

`local_program` turns one device's share of a slice's program (the module after SPMD
partitioning) into a program one chip runs alone, each collective replaced by a local operation
of the same output shape; `splash_calls` lists the splash calls a strategy runs and the tiles and
limits the tile search weighs for them; `per_device` lowers a strategy's program for a slice and
predicts its compute; `chip` times either on the chip; `op_profile` times each operation of a
program under the profiler, beside the compiler's estimate; `candidates` measures a plan's or a
request's candidates; `records` writes measured against predicted.
"""
