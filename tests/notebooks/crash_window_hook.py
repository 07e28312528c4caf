"""IPython start-up file for test_resume.py beside it: crash windows, and evidence of checkpoints.

The test copies it into a throwaway IPYTHONDIR, so only the kernels of that test run it.
- `COURSE_TEST_KILL_AT` (optional) is `append:<step>` (the kernel dies right after the
  metrics line of <step> is on disk) or `commit:<step>` (right after the run's state
  records <step> as done). No cleanup handler, flush or atexit runs: a SIGKILL is what a
  crash looks like.
- The notebook deletes each checkpoint once it is done with it; before it does, a copy of
  the checkpoint's files goes to `COURSE_TEST_EVIDENCE_DIR`, laid out as the stack's
  storage, so the test can still compare weights. The deletion itself happens as usual.
"""

import os
import shutil
import signal
from pathlib import Path

from tinker.lib.public_interfaces.rest_client import RestClient

from helpers.runlog import RunLog

_STORAGE = Path(os.environ["COURSE_LOCAL_STACK_DIR"]) / "tinker"
_EVIDENCE = Path(os.environ["COURSE_TEST_EVIDENCE_DIR"])
_event, _, _step = os.environ.get("COURSE_TEST_KILL_AT", "none:-1").partition(":")
_append, _commit = RunLog.append, RunLog.commit
_delete = RestClient.delete_checkpoint_from_tinker_path_async


def _append_then_maybe_die(self, record):
    _append(self, record)
    if _event == "append" and record["step"] == int(_step):
        os.kill(os.getpid(), signal.SIGKILL)


def _commit_then_maybe_die(self, **state):
    _commit(self, **state)
    if _event == "commit" and state.get("completed_steps") == int(_step) + 1:
        os.kill(os.getpid(), signal.SIGKILL)


async def _copy_then_delete(self, tinker_path):
    relative = tinker_path.removeprefix("tinker://")
    shutil.copytree(
        _STORAGE / relative, _EVIDENCE / relative, ignore=shutil.ignore_patterns("*.tar")
    )
    await _delete(self, tinker_path)


RunLog.append, RunLog.commit = _append_then_maybe_die, _commit_then_maybe_die
RestClient.delete_checkpoint_from_tinker_path_async = _copy_then_delete
