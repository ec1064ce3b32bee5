"""Planning: turning the validated config into jobs (no Snakemake here)."""
