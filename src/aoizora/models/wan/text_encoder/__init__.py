"""Wan's text encoder (UMT5-XXL): its config, parameters and forward, and the time of a video's text
encoding on the host (`cost`)."""
