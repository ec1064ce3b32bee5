"""Code inputs: the library source files a job runs, so that a code edit re-plans it."""

from zsdr.workflow import code_files


class CodePlan:
    """Code inputs: the library source files a job runs, so that a code edit re-plans it (a part of :class:`zsdr.plan.core.Plan`)."""

    def code(self, *modules):
        """The source files of the zsdr modules a rule runs (as inputs, so code edits re-plan it)."""
        modules = [m for name in modules for m in (name, *self.CODE_IMPORTS.get(name, ()))]
        return code_files("zsdr.io", *modules, root=self.root)

    def _setup_code(self):

        # Library modules that others import at module level: listing the importer lists them too.
        self.CODE_IMPORTS = {
            "zsdr.models.encoder": (
                "zsdr.models.adapters",
                "zsdr.models.soft_tokens",
                "zsdr.models.checkpoints",
            ),
            "zsdr.models.released": (
                "zsdr.models.encoder",
                "zsdr.models.adapters",
                "zsdr.models.soft_tokens",
                "zsdr.models.checkpoints",
            ),
            "zsdr.pretrain.coco": ("zsdr.models.checkpoints",),
            "zsdr.training.berm": ("zsdr.training.sections",),
            "zsdr.training.modir": ("zsdr.training.sections",),
            "zsdr.training.idro": ("zsdr.training.sections",),
            "zsdr.evaluation.cocodr": ("zsdr.evaluation.domain", "zsdr.evaluation.case_study"),
            "zsdr.tables.rmsc_figures": (
                "zsdr.tables.cocodr_figures",
                "zsdr.tables.modir_figures",
            ),
        }
