"""The local stand-in for Sailboxes: each command under bubblewrap, in fresh namespaces.

`local_sandbox_factory` has the call shape of `sail.tinker_sandbox_factory`, so the course's
shell-task env and the cookbook's recipes take either one. It reads no task files: the
caller names the task's working directory (`workdir`).
"""

from local_stack.client.sailbox.isolation import ResourceLimits
from local_stack.client.sailbox.local_sandbox import (
    LocalSandbox,
    SandboxUnavailableError,
    local_sandbox_factory,
)

__all__ = ["LocalSandbox", "ResourceLimits", "SandboxUnavailableError", "local_sandbox_factory"]
