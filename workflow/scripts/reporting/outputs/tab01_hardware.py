"""tab01: each hardware label's device, from the provenance its runs recorded."""

from __future__ import annotations

import json
import math

import pandas as pd

from ..render import Table

COLUMNS = ["label", "device", "sms", "memory_gib", "driver", "cuda", "cudnn", "torch", "origin", "date"]


def cudnn_version(value) -> str:
    """torch reports cuDNN 9.19.0 as 91900."""
    if isinstance(value, int) and value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return "" if value is None else str(value)


def build(job) -> Table:
    rows = []
    for row in job.results.hardware.itertuples():
        prov = json.loads(row.provenance)
        memory = prov.get("memory_bytes")
        sms = prov.get("multiprocessors")
        rows.append({"label": row.gpu, "device": row.device, "sms": "" if sms is None else str(int(sms)),
                     "memory_gib": memory / 2**30 if isinstance(memory, (int, float)) else math.nan,
                     "driver": prov.get("driver") or "", "cuda": prov.get("cuda") or "",
                     "cudnn": cudnn_version(prov.get("cudnn")), "torch": prov.get("torch") or "",
                     "origin": row.origin, "date": row.date})
    frame = pd.DataFrame(rows, columns=COLUMNS).astype({"memory_gib": float})
    return Table(frame, "Hardware: every device measured here or shipped as a reference, from the runs' provenance")
