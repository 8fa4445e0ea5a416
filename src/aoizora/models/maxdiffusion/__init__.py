"""MaxDiffusion's own Wan program (github.com/AI-Hypercomputer/maxdiffusion): the overrides a strategy
sets in its run (`overrides`) and its transformer step lowered through its own classes for Stage 2
(`program`)."""
