"""Each scale's own output folders (config ``paths.root``): the marker a run writes in them, the refusal of
folders that hold another scale's outputs, and of a command-line target typed in another scale's folders."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zsdr.workflow import ConfigError


SCALE_MARK = ".zsdr-scale"
"""The file in each output folder that says which scale's outputs it holds (written when a run starts)."""


def scale_folders(paths: Any) -> dict[str, str]:
    """``{config key: folder}`` of the output folders a run writes (a zsdr.plan.datasets.Paths)."""
    return {f"paths.{name}": getattr(paths, name) for name in paths.OUTPUTS}


def check_scale_folders(paths: Any, scale: str, workdir: str | Path = ".") -> None:
    """Refuse to run the ``scale`` config over output folders that hold another scale's outputs: a small run in
    the folders of a mini run would overwrite its models and tables, and a paper plan there would retrain
    models whose settings "changed". One ConfigError naming the folder, the scale it holds and the fix."""
    for key, folder in scale_folders(paths).items():
        mark = Path(workdir) / folder / SCALE_MARK
        try:
            held = mark.read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
        if held and held != scale:
            raise ConfigError(
                f"config key {key}: {folder} holds the outputs of the {held} scale ({folder}/{SCALE_MARK}), not "
                f"of the {scale} scale; give this scale its own folders (paths.root: the scale configs set "
                f"small and paper), or run in another working directory (snakemake --directory DIR)"
            )


def mark_scale_folders(paths: Any, scale: str, workdir: str | Path = ".") -> None:
    """Write :data:`SCALE_MARK` into every output folder of a run that starts (folders made as needed)."""
    for folder in scale_folders(paths).values():
        mark = Path(workdir) / folder / SCALE_MARK
        if mark.is_file() and mark.read_text(encoding="utf-8").strip() == scale:
            continue
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(scale + "\n", encoding="utf-8")


def command_line_targets(argv: list[str] | None = None) -> list[str]:
    """The targets of the `snakemake` command line, or of `python -m snakemake` (none when another program runs
    the workflow)."""
    argv = sys.argv if argv is None else argv
    program = Path(argv[0]) if argv else None
    if program is None or not (program.name == "snakemake"
                               or (program.name == "__main__.py" and program.parent.name == "snakemake")):
        return []
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(argv[1:])
    except SystemExit:
        return []
    return [str(t) for t in args.targets or []]


def check_targets(paths: Any, config: dict, argv: list[str] | None = None) -> None:
    """Refuse a command-line target typed in the mini scale's folders while another scale runs
    (results/table1.csv asked of the paper scale): one ConfigError naming the file this scale writes."""
    for target, here in misplaced_targets(command_line_targets(argv), paths, {}):
        raise ConfigError(
            f"target {target}: the {config['scale']} scale writes its outputs under "
            f"{config['paths']['root'] or 'their own folders'}/ (paths.root); ask for {here}"
        )


def misplaced_targets(targets: Iterable[str], paths: Any, defaults: dict[str, str]) -> list[tuple[str, str]]:
    """``[(target, the same file in this scale's folders)]`` for each target under a default output folder this
    scale does not write (``results/table1.csv`` asked of the paper scale, whose results are paper/results)."""
    out = []
    for target in targets:
        head, _, rest = str(target).partition("/")
        if not rest:
            continue  # a rule's name (`data`, `tables`), not a file
        for name in paths.OUTPUTS:
            own = getattr(paths, name)
            if head == defaults.get(name, name) and own != head and not str(target).startswith(own + "/"):
                out.append((str(target), f"{own}/{rest}"))
    return out
