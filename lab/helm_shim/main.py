"""Entry script of the lab's helm (lab/bin/helm runs it with the repository's venv)."""
import os
import sys

try:
    import helm_python  # noqa: F401  pylint: disable=unused-import
except ImportError:
    sys.stderr.write("Error: helm (lab shim): python module helm_python (PyPI helm-python-sdk) "
                     "is not importable; run scripts/bootstrap.sh\n")
    sys.exit(1)

# import the package from lab/, not this file's folder
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from helm_shim.cli import main  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
