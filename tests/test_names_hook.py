"""The ``.pth`` start-up hook (``_catwalk_steps_names.py``) in this environment, as the README's
editable install leaves it: importing Tango imports nothing of ours, and an unknown ``catwalk::``
name imports the package, from a folder with no ``tango.yml`` and no ``-i``. (Every install
layout, with ``tango run`` itself: tests/test_install.py, ``--full``.)"""

import subprocess
import sys
import sysconfig
from pathlib import Path

CHECK = """
import sys
from tango.step import Step
assert "catwalk_steps" not in sys.modules, "importing Tango imported catwalk_steps"
assert Step.resolve_class_name("catwalk::predict")[0].__name__ == "PredictStep"
assert "catwalk_steps" in sys.modules
"""


def test_the_pth_file_is_installed_beside_the_package():
    assert (Path(sysconfig.get_paths()["purelib"]) / "catwalk_steps_names.pth").read_text() == "import _catwalk_steps_names\n"


def test_a_catwalk_name_imports_the_package_only_when_tango_looks_it_up(tmp_path):
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
