from pathlib import Path

import pytest

from pipeline.runtime import jvm
from pipeline.stack.java import JavaNotFound, find_java, java_major


def _fake_java(tmp_path: Path, version: str) -> Path:
    java = tmp_path / f"java{version}"
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2025-01-01\' >&2\n')
    java.chmod(0o755)
    return java


def test_java_major_parses_old_and_new_schemes(tmp_path: Path) -> None:
    assert java_major(_fake_java(tmp_path, "17.0.15")) == 17
    assert java_major(_fake_java(tmp_path, "1.8.0_392")) == 8


def test_configured_java_too_old_is_named(tmp_path: Path) -> None:
    old = _fake_java(tmp_path, "17.0.2")
    with pytest.raises(JavaNotFound, match=r"Apicurio Registry 3.x needs Java 21\+, but .*java17.0.2 is Java 17"):
        find_java(21, "Apicurio Registry 3.x", old)


def test_no_suitable_java_lists_what_was_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.stack.java.candidates", lambda: [_fake_java(tmp_path, "11.0.1")])
    with pytest.raises(JavaNotFound, match=r"needs Java 21\+; looked at .* and found .*\(Java 11\)"):
        find_java(21, "Apicurio")


def test_missing_maven_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.runtime.jvm.shutil.which", lambda _: None)
    with pytest.raises(jvm.SetupError, match="Maven .*not on PATH"):
        jvm.KAFKA.resolve(tmp_path)


def test_resolution_is_skipped_when_the_stamp_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = jvm.KAFKA.folder(tmp_path)
    folder.mkdir(parents=True)
    (folder / ".resolved").write_text(jvm.KAFKA._fingerprint())
    monkeypatch.setattr("pipeline.runtime.jvm.subprocess.run", lambda *a, **k: pytest.fail("Maven must not run"))
    assert jvm.KAFKA.resolve(tmp_path) == folder


def test_an_archive_bundle_lays_out_its_folders_with_hard_links_whole(tmp_path: Path) -> None:
    """Trino's archive shares a jar between connectors by hard links; a link whose first copy lies outside the
    folders laid out still gets the content."""
    import io
    import tarfile

    archive = tmp_path / "server-1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("server-1/plugin/other/shared.jar", b"shared"), ("server-1/lib/main.jar", b"main"),
                           ("server-1/bin/launcher", b"#!/bin/sh")):
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
        link = tarfile.TarInfo("server-1/plugin/iceberg/shared.jar")
        link.type, link.linkname = tarfile.LNKTYPE, "server-1/plugin/other/shared.jar"
        tar.addfile(link)
    jvm._extract(archive, ("lib/", "plugin/iceberg/"))
    laid_out = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert laid_out == ["lib/main.jar", "plugin/iceberg/shared.jar"]
    assert (tmp_path / "plugin" / "iceberg" / "shared.jar").read_bytes() == b"shared"
