"""The Wan VAE's decode: its config, parameters and decoder, and the decode sharded and named as the
program a plan compiles beside the step (`sharding`, `program`)."""
