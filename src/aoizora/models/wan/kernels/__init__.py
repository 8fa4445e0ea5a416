"""The attention kernels' tiles: splash blocks fitted to VMEM (`vmem`, `splash_tiles`), MaxDiffusion's
custom kernels' tile (`custom_tiles`) and the documented deployments it reads (`experts`)."""
