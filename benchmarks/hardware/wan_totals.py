"""Published Wan totals against the predicted ones: every Wan entry of the hardware suite that publishes an
end-to-end generation time, predicted through `aoizora.models.wan.video.video_time.VideoTime` from committed parts.

    PYTHONPATH=src python benchmarks/hardware/wan_totals.py [--suite docs/data/hardware/wan_on_tpu.json]
        [--decode docs/data/video/vae_decode.json docs/data/video/vae_decode_tpu7x.json]
        [--json docs/data/hardware/wan_totals.json]

A predicted total is the sum of what the published figure times (`TIMED`, read per source and commit):
the steps × the entry's committed Q2 step (the suite's JSON), the expert swap of a two-expert model (0: both
experts resident), the VAE decode compiled for the run's own VAE mesh (its `vae_spatial`) and costed by Q2
(the decode JSON), and the text encoding where the timed call re-encodes the prompts (`text_encode_cost`:
MaxDiffusion's own per-call figure). Nothing is fitted to a published total. What a figure times and no part
predicts (a profiler trace, the decoded video's host copy and post-processing) is named, not added.
An entry whose total cannot be predicted is listed with the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "docs" / "data" / "hardware" / "wan_on_tpu.json"
DECODES = (ROOT / "docs" / "data" / "video" / "vae_decode.json",
           ROOT / "docs" / "data" / "video" / "vae_decode_tpu7x.json")
OUT = ROOT / "docs" / "data" / "hardware" / "wan_totals.json"
MD = "AI-Hypercomputer/maxdiffusion"
#: Devices of the slices the totals are on (TPU7x: two TensorCores per chip, each a JAX device), written out
#: so that reading the committed data needs no libtpu.
DEVICES = {"tpu7x:2x2x1": 8, "tpu7x:2x2x2": 16}


@dataclasses.dataclass(frozen=True)
class Timed:
    """What one entry's published figures time, read from its source at its commit.

    `total` is False where the figure is no end-to-end total (`reason` says what it is). `vae_spatial` is the
    run's decode width split (MaxDiffusion's config key; 1 = replicated), `text_inside` whether the timed call
    encodes the prompts, `profiler` whether a profiler trace runs inside the timed call; `facts` cite each
    claim as repository, path and commit."""

    total: bool
    facts: tuple[str, ...]
    vae_spatial: int | None = None
    text_inside: bool = True
    profiler: bool = False
    experts: int = 1
    reason: str = ""


# The facts shared by the MaxDiffusion commits 4e694ceb, 2e247d00, 9d663c27 and 226ed266 (each checked at
# each of the four): what `generation_time` of `src/maxdiffusion/generate_wan.py` times.
_GENERATION_TIME = (
    f"{MD} src/maxdiffusion/generate_wan.py @ {{c}}: generation_time is perf_counter around the second "
    "call_pipeline (after the compile run), which passes no prompt embeddings",
    f"{MD} src/maxdiffusion/pipelines/wan/wan_pipeline.py @ {{c}}: _prepare_model_inputs calls encode_prompt, "
    "which runs the torch UMT5 encoder (load_text_encoder: UMT5EncoderModel.from_pretrained, on the host) twice, "
    "prompts and negative prompts, on every call; no embeddings cache (_prompt_embeds_cache first appears in "
    "5a0b7c8e): the text encoding is inside the figure",
    f"{MD} src/maxdiffusion/pipelines/wan/wan_pipeline.py @ {{c}}: _decode_latents_to_video decodes on the VAE "
    "mesh, then copies the video to the host (process_allgather, np.array) and post-processes it in torch; "
    "the host copy and post-processing are inside the figure and not predicted",
    f"{MD} src/maxdiffusion/pipelines/wan/wan_pipeline.py @ {{c}}: _create_common_components builds the VAE mesh "
    "(devices / vae_spatial, vae_spatial); vae_spatial <= 0 means (2 x devices) // data parallelism",
    f"{MD} src/maxdiffusion/models/wan/autoencoder_kl_wan.py @ {{c}}: _decode is one nnx.jit program, the first "
    "latent frame outside a lax.scan over the others one at a time, the form the committed decode compiles",
)
_A14B = (f"{MD} src/maxdiffusion/pipelines/wan/wan_pipeline_2_2.py @ {{c}}: _load_and_init loads the low- and "
         "high-noise transformers onto the mesh; both stay in HBM, no swap")
_PROFILER = (f"{MD} src/maxdiffusion/pipelines/wan/wan_pipeline_2_2.py @ {{c}}: run_inference_2_2 starts and stops "
             "max_utils.Profiler (jax.profiler trace) inside every call when enable_profiler is on; base_wan_27b.yml "
             "traces steps 5-14 (skip_first_n_steps_for_profiler: 5, profiler_steps: 10)")


def _at(commit: str, *facts: str) -> tuple[str, ...]:
    return tuple(f.format(c=commit) for f in facts)


_C4E = "4e694cebe7ab75a633ee818819f59b842a128cce"
_C2E = "2e247d00b8589dd53dc19a82835ffa228ef3f1ca"
_C9D = "9d663c272ba8b0028cea6beaaf51d244a9fd0df5"
_C22 = "226ed26698123f95c707ffde7529ecaafab24d2b"

_BENCH_4E = _at(_C4E, *_GENERATION_TIME, _A14B, _PROFILER,
                f"{MD} BENCHMARK_RESULTS.md @ {{c}}: 'VAE spatial sharding: 8', one setup for the rows with and "
                "without flags; the tables give generation_time",
                f"{MD} benchmark_dp2_cp4.sh @ {{c}}: base_wan_27b.yml with vae_spatial=8 and enable_profiler=True "
                "in every run_bench call")
_README_2E = (f"{MD} README.md @ {_C2E}: 'Ring Attention' tables, 'e2e Generation Time' of one 720p/81 video; "
              "no command given, so the base configs (README: 'For Wan2.2 T2V, use base_wan_27b.yml'), which "
              "leave enable_profiler: False",)
_BENCH_22 = _at(_C22, *_GENERATION_TIME, _A14B, _PROFILER,
                f"{MD} benchmark_dp2_cp4.sh @ {{c}}: base_wan_27b.yml with vae_spatial=1 and every run_bench "
                "call's profiler True (enable_profiler)")

TIMED: dict[str, Timed] = {
    "maxdiffusion/wan22-v7-8-no-flags": Timed(True, _BENCH_4E, vae_spatial=8, profiler=True, experts=2),
    "maxdiffusion/wan22-v7-8-flags": Timed(True, _BENCH_4E, vae_spatial=8, profiler=True, experts=2),
    "maxdiffusion/wan21-v7x-8-readme": Timed(True, _at(_C2E, *_GENERATION_TIME) + _README_2E + (
        f"{MD} src/maxdiffusion/configs/base_wan_14b.yml @ {_C2E}: vae_spatial: -1, so (2 x 8) // 2 = 8 on "
        "v7x-8 with DP 2",), vae_spatial=8),
    "maxdiffusion/wan22-v7x-8-readme": Timed(True, _at(_C2E, *_GENERATION_TIME, _A14B) + _README_2E + (
        f"{MD} src/maxdiffusion/configs/base_wan_27b.yml @ {_C2E}: vae_spatial: 1 (replicated)",),
        vae_spatial=1, experts=2),
    "maxdiffusion/wan21-v7x-16-readme": Timed(True, _at(_C2E, *_GENERATION_TIME) + _README_2E + (
        f"{MD} src/maxdiffusion/configs/base_wan_14b.yml @ {_C2E}: vae_spatial: -1, so (2 x 16) // 2 = 16 on "
        "v7x-16 with DP 2",), vae_spatial=16),
    "maxdiffusion/wan22-v7x-16-readme": Timed(True, _at(_C2E, *_GENERATION_TIME, _A14B) + _README_2E + (
        f"{MD} src/maxdiffusion/configs/base_wan_27b.yml @ {_C2E}: vae_spatial: 1 (replicated)",),
        vae_spatial=1, experts=2),
    "maxdiffusion/wan22-v7-8-batch-scaling": Timed(True, _at(_C9D, *_GENERATION_TIME, _A14B, _PROFILER) + (
        f"{MD} benchmark_batch_sweep.sh and benchmark_dp2_cp4.sh @ {_C9D}: base_wan_27b.yml with vae_spatial=1 "
        "and enable_profiler True",), vae_spatial=1, profiler=True, experts=2),
    "maxdiffusion/wan22-v7-8-ulysses-forms": Timed(True, _BENCH_22, vae_spatial=1, profiler=True, experts=2),
    "maxdiffusion/wan22-v7x-8-fixed-m": Timed(False, (f"{MD} commit message of 8dd63054: 'denoise total'",),
                                              reason="no total published: the denoising steps only"),
    "maxdiffusion/wan22-v7x-8-pr430": Timed(False, ("AI-Hypercomputer/maxdiffusion PR #430 description: 'denoise'",),
                                            reason="no total published: the denoising steps only"),
    "maxdiffusion/wan22-v7x-8-ulysses-cp8-fixed-m": Timed(False, ("AI-Hypercomputer/maxdiffusion PR #436 "
                                                                  "description: s/step",),
                                                          reason="no total published: a per-step figure"),
    "gpu-tpu-pedia/wan21-v6e-8-dp2-tp4": Timed(False, ("yangwhale/gpu-tpu-pedia tpu/Wan2.1/README.md @ 332abb79: "
                                                       "Benchmark column, per step",),
                                               reason="no total published: per-step figures"),
    "gpu-tpu-pedia/wan22-i2v-v5p-8-dp2": Timed(False, ("yangwhale/gpu-tpu-pedia tpu/Wan2.2/README.md @ 0b9db4a7: "
                                                       "'Stage 2 ~180s', the transformer stage",),
                                               reason="not predicted: the transformer stage only, on v5p"),
}

#: Videos per generation where a configuration's name says so (the batch-scaling entry); else one.
VIDEOS = {"2-videos": 2}


def decode_records(paths: list[Path]) -> list[dict[str, Any]]:
    """Every decode record of the decode JSON files that compiled (no error)."""
    return [{**r, "file": str(p.relative_to(ROOT))} for p in paths if p.exists()
            for r in json.loads(p.read_text())["runs"] if "error" not in r]


def find_decode(records: list[dict[str, Any]], topology: str, videos: int, vae_spatial: int,
                devices: int) -> dict[str, Any] | None:
    """The 720p/81 decode of `videos` videos on `topology`'s VAE mesh (devices / vae_spatial, vae_spatial)."""
    mesh = [devices // vae_spatial, vae_spatial]
    for r in records:
        if (r["topology"], r["resolution"], r["frames"], r["batch"], list(r["mesh"])) == (
                topology, "720p", 81, videos, mesh):
            return r
    return None


def _configs(entry: dict[str, Any]) -> list[tuple[str, float, float, int]]:
    """(name, measured total, Q2 step, steps) of every configuration the entry publishes a total for."""
    if entry["kind"] == "pipeline":
        return [(c["name"], c["measured_total_seconds"], c["q2_seconds"], entry["steps"]) for c in entry["configs"]]
    # the batch-scaling entry stores end-to-end seconds per step over its 40 steps
    steps = 40
    return [(c["name"], c["measured"] * steps, c["q2_seconds"], steps) for c in entry["configs"]]


def predict(entry: dict[str, Any], timed: Timed, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration: the measured total, the parts and the predicted total (None and a reason
    where a part is not known)."""
    from aoizora.models.wan.text_encoder.cost import text_encode_cost
    from aoizora.models.wan.video.video_time import VideoTime
    topology = entry["configs"][0]["setup"].split(",")[0]
    devices = DEVICES[topology]
    out = []
    for name, measured, step, steps in _configs(entry):
        videos = VIDEOS.get(name, 1)
        row: dict[str, Any] = {"config": name, "topology": topology, "videos": videos,
                               "measured_total_seconds": round(measured, 6)}
        assert timed.vae_spatial is not None
        decode = find_decode(records, topology, videos, timed.vae_spatial, devices)
        if decode is None:
            row["predicted_total_seconds"] = None
            row["reason"] = (f"not predicted: the decode of {videos} video(s) on the VAE mesh "
                             f"{devices // timed.vae_spatial}x{timed.vae_spatial} not compiled")
            out.append(row)
            continue
        # the timed call re-encodes the prompts: the text encoding counts inside MaxDiffusion's figure
        text = dataclasses.replace(text_encode_cost(videos), in_generation_time=timed.text_inside)
        video = VideoTime(videos=videos, text_encode=text, steps=steps, step_seconds=step,
                          expert_swap_seconds=0.0,
                          expert_swap_basis="both experts resident" if timed.experts == 2 else "one transformer",
                          vae_decode_seconds=decode["seconds"],
                          vae_decode_basis=f"Q2 of the decode compiled on mesh {decode['mesh']} ({decode['file']})")
        total = video.maxdiffusion_generation_seconds
        assert total is not None
        row.update({"parts": video.to_json(), "vae_spatial": timed.vae_spatial,
                    "decode_memory_bytes": decode["memory_bytes"], "predicted_total_seconds": total,
                    "error": total / measured - 1, "steps_alone_exceed_measured": steps * step > measured,
                    "profiler_in_measured": timed.profiler})
        out.append(row)
    return out


def totals(suite: Path, decodes: list[Path]) -> dict[str, Any]:
    """Every Wan entry of the suite run with what its figures time and, where they are totals, the predictions."""
    import wan_table

    records = decode_records(decodes)
    doc: dict[str, Any] = {"what": "predicted against published Wan end-to-end totals (Q2 parts, nothing fitted)",
                           "suite": str(suite.relative_to(ROOT)),
                           "decodes": [str(p.relative_to(ROOT)) for p in decodes], "entries": []}
    for entry in wan_table.load([suite]):
        timed = TIMED[entry["key"]]
        item: dict[str, Any] = {"key": entry["key"], "total_published": timed.total, "facts": list(timed.facts)}
        if timed.reason:
            item["reason"] = timed.reason
        if timed.total and not timed.reason and entry["runnable"]:
            item["configs"] = predict(entry, timed, records)
        doc["entries"].append(item)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=SUITE)
    parser.add_argument("--decode", type=Path, nargs="+", default=list(DECODES))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    doc = totals(args.suite.resolve(), [p.resolve() for p in args.decode])
    for e in doc["entries"]:
        for c in e.get("configs", []):
            p = c["predicted_total_seconds"]
            print(f"{e['key']:<46}{c['config']:<20} measured {c['measured_total_seconds']:7.1f} s  "
                  + (f"predicted {p:7.1f} s  {100 * c['error']:+6.1f} %" if p is not None else c["reason"]))
        if "configs" not in e:
            print(f"{e['key']:<46}{e.get('reason', '')}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
