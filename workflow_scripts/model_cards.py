from zsdr.logs import setup_logging
from zsdr.models.cards import write_cards

setup_logging(snakemake.log[0])
p = snakemake.params
write_cards(p.cards, p.metric, p.scale, p.source, snakemake.output.index)
