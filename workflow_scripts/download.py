from zsdr.data.download import download
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
spec, fetch = snakemake.params.spec, snakemake.params.fetch
download(
    spec["url"],
    snakemake.output[0],
    md5=spec.get("md5"),
    sha256=spec.get("sha256"),
    size=spec.get("size"),
    checksum_from=spec.get("checksum_from"),
    mirror=fetch["mirror"],
    retries=fetch["retries"],
    timeout=fetch["timeout"],
)
