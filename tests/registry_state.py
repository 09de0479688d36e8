# Apache-2.0
"""What lab/registry.sh leaves in its state directory, as one object for tests."""
import contextlib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Registry:
    """A registry started by lab/registry.sh: TLS with its CA, htpasswd auth."""
    address: str
    ca: str
    cert_dir: str
    username: str
    password: str

    @classmethod
    def from_state_dir(cls, state):
        state = Path(state)

        def read(name):
            return (state / name).read_text().strip()
        return cls(address=read("address"), ca=str(state / "ca.crt"), cert_dir=str(state),
                   username=read("username"), password=read("password"))

    # Its filesystem storage (lab/registry.sh keeps it under <state>/server/data; the state is cert_dir).
    def repository_dir(self, repository):
        """A repository's folder in the storage, e.g. repository_dir("nvidia/cuda")."""
        return Path(self.cert_dir) / "server" / "data" / "docker" / "registry" / "v2" / "repositories" / repository

    def revision_link(self, repository, tag):
        """The link file of the manifest `tag` names: unreadable, the registry answers 500 for it."""
        root = self.repository_dir(repository)
        digest = (root / "_manifests" / "tags" / tag / "current" / "link").read_text().strip()
        return root / "_manifests" / "revisions" / digest.replace(":", "/") / "link"

    @property
    def log(self):
        return Path(self.cert_dir) / "server" / "registry.log"


@contextlib.contextmanager
def unreadable(link):
    """Swap one of the registry's link files for a folder: its read fails ('is a directory') and
    docker-registry answers HTTP 500 for whatever needs it. Put back on the way out."""
    saved = link.with_name(link.name + ".saved")
    link.rename(saved)
    try:
        link.mkdir()
        yield
    finally:
        if link.is_dir():
            link.rmdir()
        saved.rename(link)
