# Apache-2.0
"""What lab/registry.sh leaves in its state directory, as one object for tests."""
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
