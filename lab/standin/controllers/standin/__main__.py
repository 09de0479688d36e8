"""STAND-IN (lab only): `python3 -m standin <fork>/<image> [args]`, the images' entrypoint."""
import sys

from . import fractioning, kai

PROGRAMS = {"kai-scheduler": kai.main, "gpu-fractioning": fractioning.main}


def main(argv):
    if not argv or "/" not in argv[0] or argv[0].split("/", 1)[0] not in PROGRAMS:
        print(f"usage: python3 -m standin {{{','.join(PROGRAMS)}}}/<image> [args]", file=sys.stderr)
        return 2
    fork, image = argv[0].split("/", 1)
    return PROGRAMS[fork](image, argv[1:]) or 0


sys.exit(main(sys.argv[1:]))
