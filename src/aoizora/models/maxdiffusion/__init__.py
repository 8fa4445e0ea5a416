"""MaxDiffusion's own Wan program (github.com/AI-Hypercomputer/maxdiffusion): the overrides a strategy
sets in its run (`overrides`) and its transformer step lowered through its own classes for Stage 2
(`program`). This module imports nothing, so that argument checks can name the programs without
loading jax."""

#: the programs Stage 2 can compile for a Wan strategy: aoizora's Wan step, or MaxDiffusion's own
PROGRAMS = ("aoizora", "maxdiffusion")
