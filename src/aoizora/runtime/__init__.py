"""Running a plan: the planned Wan model on the planned mesh, timed; on CPU a small stand-in config."""
