import hashlib

from zsdr.io import atomic_write
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
with atomic_write(snakemake.output[0]) as out:
    for path in sorted(set(snakemake.input)):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out.write(f"{digest.hexdigest()}  {path}\n")
