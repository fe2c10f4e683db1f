"""Runs a config as ``tango run`` does, from any directory, with the package's Jsonnet helpers on
the import path and the package imported:

    python -m catwalk_steps.run my_config.jsonnet -w workspace [any other `tango run` option]

A config outside this repository's ``configs/`` imports the helpers as those configs do
(``import "lib.libsonnet"``, ``import "suites.libsonnet"``): Tango evaluates a config with its
own folder alone on the import path, and the helpers ship inside the package
(:data:`~.command_line.CONFIGS`), so plain ``tango run`` cannot find them. The steps and cache
keys are those ``tango run`` gives the same config; ``-i catwalk_steps`` is added for the
processes Tango's multicore executor starts.
"""

import sys
from typing import List, Optional

from .command_line import CONFIGS


def helpers_on_jsonnet_path() -> None:
    """Tango's config reader evaluates a file with the file's folder as the one import path; this
    adds :data:`CONFIGS` after it (a file beside the config still comes first)."""
    import rjsonnet
    from tango.common import params

    def evaluate_file(filename: str, jpathdir=None, **settings):
        folders = [jpathdir] if isinstance(jpathdir, str) else list(jpathdir or [])
        return rjsonnet.evaluate_file(filename, [*folders, str(CONFIGS)], **settings)

    params.evaluate_file = evaluate_file


def main(argv: Optional[List[str]] = None) -> int:
    from tango.__main__ import main as tango

    import catwalk_steps  # noqa: F401  (registers the steps, patches Tango)

    helpers_on_jsonnet_path()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    tango(["run", *arguments, "-i", "catwalk_steps"], prog_name="python -m catwalk_steps.run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
