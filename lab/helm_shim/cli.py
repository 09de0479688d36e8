"""Entry point of lab/bin/helm: parse, refuse loudly or run, exit like helm."""
import io
import os
import sys

import helm_python

from .argv import Refusal, UsageError, parse
from .commands import HANDLERS, HelmFailure, check_environment

EXIT_FAILED = 1      # helm's own exit status for any error
EXIT_UNSUPPORTED = 2  # asked for something this shim does not implement


def main(argv, environ=None, stdout=None, stderr=None):
    environ = os.environ if environ is None else environ
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        parsed = parse(argv)
        check_environment(environ)
    except Refusal as exc:
        stderr.write(f"Error: helm (lab shim): {exc}\n")
        return EXIT_UNSUPPORTED
    except UsageError as exc:
        stderr.write(f"Error: {exc}\n")
        return EXIT_FAILED
    buffer = io.StringIO()
    try:
        HANDLERS[parsed.command](parsed, environ, buffer)
    except Refusal as exc:
        stdout.write(buffer.getvalue())
        stderr.write(f"Error: helm (lab shim): {exc}\n")
        return EXIT_UNSUPPORTED
    except (UsageError, HelmFailure) as exc:
        stdout.write(buffer.getvalue())
        stderr.write(f"Error: {exc}\n")
        return EXIT_FAILED
    except helm_python.HelmError as exc:
        stdout.write(buffer.getvalue())
        stderr.write(f"Error: {exc.detail}\n")
        return EXIT_FAILED
    stdout.write(buffer.getvalue())
    return 0
