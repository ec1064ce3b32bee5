import torch

from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.training.launch import launch

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
torch.set_num_threads(snakemake.threads)
p = snakemake.params
r = snakemake.resources
nodes = max(1, int(p.launch["nodes"]))
gpus = int(r.get("gpu", 0) or 0) // nodes  # on each node, as are the CPUs a GPU job asks per GPU
cpus = gpus * int(r.get("cpus_per_gpu", 0) or 0) or snakemake.threads
launch(p.spec, processes=p.launch["processes"], nodes=nodes, launcher=p.launch["launcher"],
       log_file=snakemake.log[0], loop=p.launch["loop"], threads=snakemake.threads, cpus=cpus, gpus=gpus)
