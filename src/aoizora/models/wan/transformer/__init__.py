"""The Wan DiT: its config, strategy (with the kernel profiles it names), attention kernels, rotary
embedding, parameters, checkpoint reading, sharding and forward; the lowest Wan sub-package."""
