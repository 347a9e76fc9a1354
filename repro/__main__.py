"""`python -m icml26zoo.repro`: list, describe and run the registered experiments (see `icml26zoo.repro.cli`)."""

import sys

from icml26zoo.extras import MissingExtraError, require_extras


def _console() -> int:
    # Checked before the command line imports the trainer: a core-only install gets one line with the fix.
    try:
        require_extras("train", what="python -m icml26zoo.repro")
    except MissingExtraError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from icml26zoo.repro.cli import main

    return main(compilation_cache=True)


if __name__ == "__main__":
    sys.exit(_console())
