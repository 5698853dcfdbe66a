"""What a configuration plans, before any job runs: the result layout (and its one reader), the configuration's
checks, the files of every run, profile and reference set (Plan), and the lines the workflow says before it starts
(targets it cannot build, labels without Nsight Compute, a cluster's sbatch requests)."""
