"""tab01: each hardware label's device, from the provenance its runs recorded."""

from __future__ import annotations

import json
import math

import pandas as pd

from ..derived import cudnn_version
from ..render import Table

COLUMNS = ["label", "device", "sms", "memory_gib", "max_sm_clock_mhz", "driver", "cuda", "cudnn", "torch", "origin",
           "date"]


def build(job) -> Table:
    rows = []
    for row in job.results.hardware.itertuples():
        prov = json.loads(row.provenance)
        memory = prov.get("memory_bytes")
        sms = prov.get("multiprocessors")
        clock = (prov.get("clocks") or {}).get("sm_max_mhz")  # recorded since the clocks joined the provenance
        rows.append({"label": row.gpu, "device": row.device, "sms": "" if sms is None else str(int(sms)),
                     "memory_gib": memory / 2**30 if isinstance(memory, (int, float)) else math.nan,
                     "max_sm_clock_mhz": float(clock) if isinstance(clock, (int, float)) else math.nan,
                     "driver": prov.get("driver") or "", "cuda": prov.get("cuda") or "",
                     "cudnn": cudnn_version(prov.get("cudnn")), "torch": prov.get("torch") or "",
                     "origin": row.origin, "date": row.date})
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({"memory_gib": float, "max_sm_clock_mhz": float})
    return Table(frame, "Hardware: every device measured here or shipped as a reference, from the runs' provenance")


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("label", "label"), ("device", "device"), ("origin", "origin"), ("date", "measured"),
                   ("sms", "SMs"), ("memory_gib", "memory GiB"), ("driver", "driver"), ("cuda", "CUDA"),
                   ("cudnn", "cuDNN"), ("torch", "torch")]
