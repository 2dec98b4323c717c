"""Where the local mirror of a cloud experiment lives (``tuner.experiment.storage.mirror_dir``), without a bucket."""

from pathlib import Path


def test_the_default_mirror_folder_is_under_home_cache(tmp_path, monkeypatch):
    """README: the driver keeps a local mirror of a cloud experiment "under `~/.cache/tuner/storage/`
    (`$TUNER_CACHE_DIR/storage/` when that is set)"."""
    from tuner.experiment.storage import mirror_dir

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TUNER_CACHE_DIR", raising=False)
    assert mirror_dir("s3://bucket/runs/mnist-asha") == (home / ".cache" / "tuner" / "storage" / "s3" / "bucket" /
                                                         "runs" / "mnist-asha").resolve()
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    assert mirror_dir("s3://bucket/runs/mnist-asha").is_relative_to(Path(tmp_path / "cache" / "storage").resolve())
