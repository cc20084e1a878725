"""No file of the repository names a package index's or a mirror's host.

Where packages come from is the machine's own configuration: apt's sources list (``.ci/images``
reads its mirror from there for debootstrap), pip's configuration (pip inside the image build uses
the host's), npm's. A host written into a file (a Debian archive or security host, the Python
package index or its files host, the npm registry) overrides that configuration for everyone
who runs it, and fails where that host cannot be reached. The rule reads every file git tracks
or would track (untracked files not ignored included, so a new file is caught before it is
added); the host names are built from pieces, so this file names none of them.
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_HOSTS = (
    ("deb", "debian", "org"),  # the Debian archive's
    ("ftp", "debian", "org"),
    ("httpredir", "debian", "org"),
    ("security", "debian", "org"),  # and its security archive's
    ("pypi", "org"),  # the Python package index (and its subdomains: upload., test.)
    ("pypi", "python", "org"),  # its old name
    ("files", "pythonhosted", "org"),  # its files
    ("registry", "npmjs", "org"),  # npm's registry
    ("registry", "yarnpkg", "com"),  # and yarn's mirror of it
)
_NAMES = "|".join([*(r"\.".join(parts) for parts in _HOSTS), r"ftp\.[a-z]{2}\.debian\.org"])  # ftp.<country>.
HOST = re.compile(rf"(?<![\w-])(?:[\w-]+\.)*(?:{_NAMES})(?![\w-])", re.IGNORECASE)


def repository_files() -> list[str]:
    """The files git tracks, and the untracked ones it does not ignore (relative paths)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout  # fmt: skip
    return sorted({name for name in listed.decode().split("\0") if name})


def index_hosts(root: Path, files: list[str]) -> list[str]:
    """``path:line: host`` for each package index or mirror host in a text file."""
    found = []
    for name in files:
        path = root / name
        if not path.is_file():
            continue  # deleted in the work tree
        data = path.read_bytes()
        if b"\0" in data:
            continue  # a binary file
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            found += [f"{name}:{number}: {match.group(0)}" for match in HOST.finditer(line)]
    return found


def test_no_file_names_a_package_index_or_mirror_host():
    assert index_hosts(ROOT, repository_files()) == []


def test_a_planted_host_is_caught_and_a_look_alike_is_not(tmp_path):
    debian = ".".join(("deb", "debian", "org"))
    index = ".".join(("pypi", "org"))
    files = ("fetch.sh", "Dockerfile", "docs.md", "clean.md", "image.png")
    (tmp_path / files[0]).write_text(f"debootstrap bookworm /rootfs http://{debian}/debian\n")
    (tmp_path / files[1]).write_text(f"RUN pip install --index-url https://upload.{index}/simple x\n")
    (tmp_path / files[2]).write_text("see\n" + ".".join(("https://files", "pythonhosted", "org/x.whl")) + "\n")
    (tmp_path / files[3]).write_text(f"not{debian}s, my{index}.example.com and {index}-mirror\n")
    (tmp_path / files[4]).write_bytes(b"\x89PNG\0" + debian.encode())
    assert index_hosts(tmp_path, [*files, "gone.txt"]) == [
        f"fetch.sh:1: {debian}",
        f"Dockerfile:1: upload.{index}",
        f"docs.md:2: {'.'.join(('files', 'pythonhosted', 'org'))}",
    ]
