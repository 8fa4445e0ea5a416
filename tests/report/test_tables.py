"""The plan table keeps every number readable, however long a strategy key is."""

from __future__ import annotations

import io

from rich.console import Console

from aoizora.plan import Plan
from aoizora.report.tables import print_plan
from tests.plan.plan_doc import plan_doc

LONG_KEY = ("data=2,context=4 | weights=gathered | attn=allgather | blocks=512/512/512 | "
            "maxdiffusion-readme-default-blocks flags")


def test_numbers_stay_whole_beside_a_long_expert_key():
    doc = plan_doc()
    doc["alternatives"] = [
        {"strategy": doc["strategy"]["key"], "placement": "jax-default", "step_seconds": 10.13763,
         "exposed_comm_seconds": 0.20581, "jax_default_step_seconds": 10.62854,
         "memory_bytes_per_device": 7.87 * 2**30},
        {"strategy": LONG_KEY, "placement": "data=y0 context=x.y1~snake", "step_seconds": 10.16271,
         "exposed_comm_seconds": 0.17789, "jax_default_step_seconds": 10.65624,
         "memory_bytes_per_device": 11.11 * 2**30},
    ]
    out = io.StringIO()
    print_plan(Plan(doc), console=Console(file=out, width=150))
    text = out.getvalue()
    for number in ("10,137.63", "205.81", "10,628.54", "7.87", "10,162.71", "177.89", "10,656.24", "11.11"):
        assert number in text, number
