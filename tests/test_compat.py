import subprocess

from tango.step_info import EnvironmentMetadata

import catwalk_steps  # noqa: F401  (applies the patch)


def test_step_metadata_survives_a_repository_without_commit_or_origin(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert EnvironmentMetadata().git is None  # Tango 1.3.2 raises ValueError here
    (tmp_path / "f").write_text("x")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    assert EnvironmentMetadata().git is None  # a commit, but no origin
    subprocess.run(["git", "remote", "add", "origin", "https://example.invalid/r.git"], check=True)
    assert EnvironmentMetadata().git.remote == "https://example.invalid/r.git"
