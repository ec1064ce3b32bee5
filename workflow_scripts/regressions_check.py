import sys
from pathlib import Path

from zsdr.logs import setup_logging
from zsdr.regressions.report import check

setup_logging(snakemake.log[0])
failed = check(snakemake.input[0])
if failed:
    print(f"{len(failed)} published value(s) not reproduced ({snakemake.input[0]}):", *failed, sep="\n  ", file=sys.stderr)
    sys.exit(1)
Path(snakemake.output[0]).write_text("every measured row PASSes\n", encoding="utf-8")
