"""What every job script and library module shares about jobs: the errors a user can fix (one line, no traceback)
and running a Snakemake `script:` job (its log, one-line errors, no half-written outputs)."""
