"""A hub model, tokenizer or dataset that cannot be fetched says why (offline mode, no network,
no such name) and how to run offline. No test here needs, or uses, the network."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import transformers.utils.hub
from huggingface_hub import constants
from huggingface_hub.errors import RepositoryNotFoundError
from tango.common.exceptions import ConfigurationError

from catwalk_steps import PiqaTask
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.storage import hub

from .conftest import REPO

NAME = "catwalk-steps-tests/no-such-repo"  # never in any HF cache
OFFLINE_WAY = "To run offline, give a local copy as 'rc::/path/to/dir'"

LOADS = """
import json, sys
from catwalk_steps import PiqaTask
from catwalk_steps.models.loading import ModelSpec
spec = ModelSpec.parse("rc::" + sys.argv[1])
for load in (spec.load_tokenizer, spec.load_config, lambda: PiqaTask(hub_id=sys.argv[1]).instances("validation")):
    try:
        load()
    except Exception as e:
        print(json.dumps(f"{type(e).__name__}: {e}"))
"""


def test_offline_mode_says_the_name_is_not_in_the_cache_and_how_to_run_offline(tmp_path):
    # A fresh process, as HF_HUB_OFFLINE=1 is read when the hub client is imported.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", LOADS, NAME], cwd=REPO, env=env, capture_output=True, text=True)
    tokenizer, config, dataset = map(json.loads, done.stdout.splitlines())
    for error, what in ((tokenizer, "tokenizer"), (config, "model"), (dataset, "dataset")):
        assert error.startswith(f"ConfigurationError: Cannot load {what} '{NAME}': offline mode is on (HF_HUB_OFFLINE) "
                                f"and it is not in the HF cache ({tmp_path / 'hf'})"), error
        assert "or set HF_HUB_OFFLINE=1 with an HF cache" in error
    assert OFFLINE_WAY in tokenizer and OFFLINE_WAY in config
    assert "To run offline, give the task local files of the same fields as data_files" in dataset
    assert f"`hf download {NAME} --repo-type dataset`" in dataset


def not_found(*args, **kwargs):
    # What the hub client raises on a 404 for the repository (the response: what it reads of one).
    response = SimpleNamespace(status_code=404, headers={}, request=None)
    raise RepositoryNotFoundError("404 Repository Not Found", response=response)


def unreachable(*args, **kwargs):
    raise ConnectionError("[Errno -2] Name or service not known")


def disk_full(*args, **kwargs):
    raise OSError("disk full")


@pytest.fixture
def online(monkeypatch):
    """The hub client in online mode, whatever the environment says; every download fails as
    the test says (``fail``) instead of reaching the network."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)

    def fail(error, reachable: bool) -> None:
        for name in ("hf_hub_download", "snapshot_download"):
            monkeypatch.setattr(transformers.utils.hub, name, error)
        monkeypatch.setattr(hub, "hub_reachable", lambda: reachable)

    return fail


@pytest.mark.parametrize("load", ["load_tokenizer", "load_config"])
def test_a_name_the_reachable_hub_does_not_have_is_said_to_not_exist(online, load):
    online(not_found, reachable=True)
    with pytest.raises(ConfigurationError) as error:
        getattr(ModelSpec.parse(f"rc::{NAME}"), load)()
    assert f"'{NAME}': the hub ({constants.ENDPOINT}) was reached, but it does not exist there" in str(error.value)


@pytest.mark.parametrize("load", ["load_tokenizer", "load_config"])
def test_an_unreachable_hub_is_said_to_be_unreachable(online, load):
    online(unreachable, reachable=False)
    with pytest.raises(ConfigurationError) as error:
        getattr(ModelSpec.parse(f"rc::{NAME}"), load)()
    message = str(error.value)
    assert f"'{NAME}': the HF hub ({constants.ENDPOINT}) could not be reached from this machine" in message
    assert OFFLINE_WAY in message and "or set HF_HUB_OFFLINE=1 with an HF cache" in message


def test_a_dataset_the_reachable_hub_does_not_have_is_said_to_not_exist(online, monkeypatch):
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    def load_dataset(path, *args, **kwargs):  # as datasets words it, the hub's error as its cause
        try:
            not_found()
        except RepositoryNotFoundError as e:
            raise DatasetNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.") from e

    online(not_found, reachable=True)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(ConfigurationError, match="was reached, but it does not exist there"):
        PiqaTask(hub_id=NAME).instances("validation")


def test_a_failure_that_is_not_the_hubs_keeps_its_own_message(online):
    online(disk_full, reachable=True)
    with pytest.raises(ConfigurationError, match="not a local directory or hub name.*disk full"):
        ModelSpec.parse(f"rc::{NAME}").load_config()


def test_hub_reachable_is_false_when_no_connection_opens(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens here
    assert hub.hub_reachable() is False
