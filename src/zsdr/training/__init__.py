"""Training: one loop (:mod:`zsdr.training.trainer`), the data it reads (:mod:`zsdr.training.data`),
the recipes that compose them (:mod:`zsdr.training.recipes`); the cross-device negative gather they
share with the losses is :mod:`zsdr.distributed`."""
