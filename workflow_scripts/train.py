import torch

from zsdr.devices import claim_for_job, node_share
from zsdr.logs import setup_logging
from zsdr.training.launch import launch

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
torch.set_num_threads(snakemake.threads)
p = snakemake.params
nodes, gpus, cpus = node_share(snakemake, p.launch["nodes"])  # on each node
launch(p.spec, processes=p.launch["processes"], nodes=nodes, launcher=p.launch["launcher"],
       log_file=snakemake.log[0], loop=p.launch["loop"], threads=snakemake.threads, cpus=cpus, gpus=gpus)
