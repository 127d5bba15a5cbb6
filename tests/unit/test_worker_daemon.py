"""The worker daemon's zip importers: an archive is read again only when it changed (CPython gh-103200)."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from pathlib import Path
from unittest import mock

from pipeline.runtime.worker_daemon import SteadyZipImporter, steady_zip_imports


def _archive(path: Path, modules: list[str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name in modules:
            archive.writestr(f"{name}.py", f"NAME = {name!r}\n")


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path: Path) -> None:
    archive = tmp_path / "steady.zip"
    _archive(archive, ["steady_first"])
    hooks, cache, path = list(sys.path_hooks), dict(sys.path_importer_cache), list(sys.path)
    sys.path.insert(0, str(archive))
    try:
        importlib.import_module("steady_first")
        assert type(sys.path_importer_cache[str(archive)]) is zipimport.zipimporter
        steady_zip_imports()
        assert isinstance(sys.path_importer_cache[str(archive)], SteadyZipImporter)
        read = mock.patch.object(zipimport, "_read_directory", wraps=zipimport._read_directory)
        with read as reads:
            importlib.invalidate_caches()
        assert str(archive) not in [call.args[0] for call in reads.call_args_list]

        _archive(archive, ["steady_first", "steady_second_module"])  # another size: changed
        importlib.invalidate_caches()
        assert importlib.import_module("steady_second_module").NAME == "steady_second_module"
    finally:
        sys.path_hooks[:], sys.path[:] = hooks, path
        sys.path_importer_cache.clear()
        sys.path_importer_cache.update(cache)
        for name in ("steady_first", "steady_second_module"):
            sys.modules.pop(name, None)
