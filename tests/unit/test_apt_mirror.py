"""hack/lib/apt-mirror.sh: the Debian archive for the images comes from this machine's apt
sources (never a host written into the project), or DISTTRAIN_DEBIAN_MIRROR."""

from __future__ import annotations

import subprocess

from .helpers import ROOT

SCRIPT = ROOT / "hack" / "lib" / "apt-mirror.sh"


def mirror(apt_dir, suite: str, override: str = "") -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "DISTTRAIN_APT_DIR": str(apt_dir), "DISTTRAIN_DEBIAN_MIRROR": override}
    return subprocess.run(["bash", "-c", f"source {SCRIPT} && debian_mirror {suite}"], capture_output=True,
                          text=True, env=env, timeout=60)


def test_the_deb822_source_that_serves_the_suite(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n")
    assert mirror(tmp_path, "bookworm").stdout == "http://mirror.example/debian\n"
    assert mirror(tmp_path, "bookworm-security").stdout == "http://mirror.example/debian-security\n"


def test_a_one_line_source_with_options(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("# a comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n")
    assert mirror(tmp_path, "bookworm").stdout == "http://m.example/debian\n"


def test_the_override_wins_and_no_source_says_what_to_set(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    assert mirror(tmp_path, "bookworm", override="http://local/debian/").stdout == "http://local/debian\n"
    missing = mirror(tmp_path, "bookworm")
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no apt source for Debian bookworm" in missing.stderr and "DISTTRAIN_DEBIAN_MIRROR" in missing.stderr
