"""Training: one loop (:mod:`zsdr.training.trainer`), the data it reads (:mod:`zsdr.data.training_set`,
:mod:`zsdr.training.data`),
the recipes that compose them (:mod:`zsdr.training.recipes`) and the processes that train one
(:mod:`zsdr.training.launch`); the cross-device negative gather they
share with the losses is :mod:`zsdr.distributed`."""
