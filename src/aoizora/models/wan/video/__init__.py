"""One video's generation: the denoising step and its sampling loop, the schedulers, Wan 2.2's
two-expert pipeline, and a video's time end to end (`video_time`)."""
