"""The local stand-in for Sailboxes: each command under bubblewrap, in fresh namespaces.

`local_sandbox_factory` has the call shape of `sail.tinker_sandbox_factory`, so the course's
shell-task env and the cookbook's recipes take either one. It reads no task files: the
caller names the task's working directory (`workdir`).

    local_sandbox     the sandbox as `sail.TinkerSandbox` is used: commands (`bash -lc`), file
                      reads and writes, timeouts, the lifetime budget; and the factory
    image_filesystem  what a Sailbox root may write: HOME with Debian's login files,
                      /etc/profile(.d), the working directory, /tests and /logs
    isolation         the bubblewrap command line of one command, and the check that it works
    process           one running bubblewrap: its output within bounds, its kill
    enclosure         the host side: the sandbox's tmpfs and memory cgroup, and the sweep of
                      a killed kernel's sandboxes
    sailbox_core      sail's own Sailbox calls (`sail.Sailbox`, `tinker_sandbox_factory`)
                      answered by local sandboxes
"""

from local_stack.client.sailbox.isolation import ResourceLimits
from local_stack.client.sailbox.local_sandbox import (
    LocalSandbox,
    SandboxUnavailableError,
    local_sandbox_factory,
)

__all__ = ["LocalSandbox", "ResourceLimits", "SandboxUnavailableError", "local_sandbox_factory"]
