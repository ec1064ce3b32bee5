"""Training: one loop (:mod:`zsdr.training.trainer`), the data it reads (:mod:`zsdr.training.data`),
the cross-device negative gather (:mod:`zsdr.training.distributed`) and the recipes that compose
them (:mod:`zsdr.training.recipes`)."""
