"""Everything is in pyproject.toml but one file: ``catwalk_steps_names.pth``, which Python's
``site`` runs at start-up from the site-packages folder it lands in, so that ``tango run`` finds
``catwalk::`` names without ``-i catwalk_steps`` (why and how: ``_catwalk_steps_names.py``).
A ``.pth`` file belongs to no package, so the build writes it at the wheel's root itself: the
build folder's for a wheel, and for an editable install the folder of the files setuptools
installs as they are (its ``install_lib``), since an editable wheel ships no build folder."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "catwalk_steps_names.pth"


class BuildWithPthFile(build_py):
    def run(self) -> None:
        super().run()
        self.mkpath(self.pth_folder())
        (Path(self.pth_folder()) / PTH).write_text("import _catwalk_steps_names\n")

    def pth_folder(self) -> str:
        return self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib

    def get_outputs(self, include_bytecode: bool = True):
        return [*super().get_outputs(include_bytecode), str(Path(self.pth_folder()) / PTH)]


setup(cmdclass={"build_py": BuildWithPthFile})
