"""The planning space: `space.WanSpace` answering Stage 1's protocol from one module per concern
(enumeration, tiles, lowering, costs, plan file, video parts) and Wan 2.2's `pipeline_space`; the top."""
