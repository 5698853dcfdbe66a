"""One variant's side of a paired comparison, in a process of its own (medddpm.comparison says why).

Started by `Workers` with the address of the comparing process's listener; it sends its process id first (the
processes start together and connect in any order), builds the side of each phase when asked, times one step per
request, and answers each request with ("ok", value) (for a build: its process id, the build's seconds and its
compilation's cache lookups; for a step: (ms, others)) or ("error", one line, traceback); "stop" ends it without an
answer. Nothing else passes between the processes: the side's model, caches and backend state stay in this one.

    python3 -m medddpm.comparison_worker <unix socket> <authkey in hex> [ahead]

`ahead`: a process of medddpm.comparison_workers.compile_ahead, whose builds are for the on-disk caches they leave;
its kernels neither keep nor read a tuned launch configuration (that module says why).
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from multiprocessing.connection import Client


def serve(address: str, authkey: bytes, ahead: bool = False) -> None:
    from . import compile_cache
    from .comparison import sampling_side, training_side
    from .variants import raise_recompile_limits

    if ahead:
        import torch._inductor.config

        torch._inductor.config.autotune_local_cache = False

    raise_recompile_limits(2)  # two phases compile the U-Net for two module instances (dynamo guards on the instance)
    builders = {"train": training_side, "sample": sampling_side}
    with Client(address, family="AF_UNIX", authkey=authkey) as connection:
        connection.send(os.getpid())  # which variant's process this is: they connect in any order
        side = None
        while True:
            request, *arguments = connection.recv()
            try:
                if request == "build":  # the phase's side, the previous phase's freed first
                    phase, kwargs = arguments
                    side = None
                    gc.collect()
                    started = time.perf_counter()
                    with compile_cache.counting() as cache:
                        side = builders[phase](**kwargs)
                    connection.send(("ok", {"process": os.getpid(), "seconds": time.perf_counter() - started,
                                            "compile_cache": cache}))
                elif request == "time":
                    connection.send(("ok", side.timed()))
                else:  # "stop": unanswered, the comparing process has closed its end already
                    return
            except Exception as error:  # told to the comparing process, which ends the job with it
                connection.send(("error", f"{type(error).__name__}: {error}", traceback.format_exc()))
                return


if __name__ == "__main__":
    serve(sys.argv[1], bytes.fromhex(sys.argv[2]), ahead=sys.argv[3:] == ["ahead"])
