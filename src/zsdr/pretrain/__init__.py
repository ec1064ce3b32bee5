"""Unsupervised pre-training on a corpus: masked language modelling (:mod:`zsdr.pretrain.mlm`), the
training of DDR's Domain Adaption Module, run by the same :class:`~zsdr.training.trainer.Trainer`
as every recipe."""
