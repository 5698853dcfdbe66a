"""`python -m snakemake` with the executor's status checks at most STATUS_CHECK_CAP_S apart, for the test cluster.

The SLURM plugin checks its jobs `slurm-init-seconds-before-status-checks` after a change, then 10 s later each time
nothing finished (a fixed step in the plugin, not a setting): with jobs of 10-20 s, each level of the DAG waits
14-36 s for the check that sees it done. On the test cluster, where the jobs and the checks are cheap, checking
every few seconds keeps the run about the jobs themselves. What is submitted, and how, stays the plugin's.
"""

import asyncio
import sys

from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

# A check is one `squeue` (5-50 ms on the test cluster); a job that ends waits for the next one, half the cap on
# average, at each of the DAG's levels.
STATUS_CHECK_CAP_S = 0.5


async def _sleep_at_most_the_cap(self) -> None:
    await asyncio.sleep(min(self.next_seconds_between_status_checks, STATUS_CHECK_CAP_S))


RemoteExecutor.sleep = _sleep_at_most_the_cap

if __name__ == "__main__":
    from snakemake.cli import main

    sys.exit(main())
