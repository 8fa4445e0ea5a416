"""Hardware reference suite: published TPU measurements, the same programs compiled with libtpu,
and aoizora's predictions of them (`.venv/bin/python benchmarks/hardware/run.py`)."""
