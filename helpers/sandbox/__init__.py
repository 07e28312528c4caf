"""Run model-written commands outside the training process: a local sandbox and a shell-task env.

`local_sandbox_factory` has the call shape of `sail.tinker_sandbox_factory`, so the env
and the cookbook's recipes take either one.
"""

from helpers.sandbox.harbor_task import HarborTaskDir, load_harbor_task
from helpers.sandbox.isolation import ResourceLimits
from helpers.sandbox.local_sandbox import (
    LocalSandbox,
    SandboxUnavailableError,
    local_sandbox_factory,
)
from helpers.sandbox.shell_env import (
    ShellTaskEnv,
    ShellTaskGroupBuilder,
    extract_bash_script,
    upload_task_inputs,
)

__all__ = [
    "HarborTaskDir",
    "LocalSandbox",
    "ResourceLimits",
    "SandboxUnavailableError",
    "ShellTaskEnv",
    "ShellTaskGroupBuilder",
    "extract_bash_script",
    "load_harbor_task",
    "local_sandbox_factory",
    "upload_task_inputs",
]
