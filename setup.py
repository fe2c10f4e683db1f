"""Everything is in pyproject.toml but one file: Tango finds a ``catwalk::`` name it does not
know only in its own ``tango/integrations/`` folder, so the wheel puts
``tango_integration/catwalk.py`` there (why: its docstring)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithTangoIntegration(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "tango" / "integrations"
        self.mkpath(str(target))
        self.copy_file("tango_integration/catwalk.py", str(target / "catwalk.py"))

    def get_outputs(self, include_bytecode: bool = True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / "tango" / "integrations" / "catwalk.py")]


setup(cmdclass={"build_py": BuildWithTangoIntegration})
