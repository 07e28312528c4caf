"""Run pip with dependency markers evaluated as on another platform.

    python pip_as_platform.py '{"sys_platform": "darwin", ...}' download --platform ... PKG

pip's `--platform` picks wheels built for another platform, but pip still evaluates the
markers of dependencies (`appnope; sys_platform == "darwin"`) for the machine it runs on. A
wheelhouse for Macs made on Linux would then lack the Mac-only dependencies and ask for the
Linux-only ones. This runs pip with the marker environment of its vendored `packaging`
overridden by the given values; `install.py wheelhouse --platform` uses it.
"""

from __future__ import annotations

import json
import sys

from pip._internal.cli.main import main
from pip._vendor.packaging import markers


def run(target: dict[str, str], pip_args: list[str]) -> int:
    this_machine = markers.default_environment
    markers.default_environment = lambda: {**this_machine(), **target}
    return main(pip_args)


if __name__ == "__main__":
    sys.exit(run(json.loads(sys.argv[1]), sys.argv[2:]))
