"""IPython start-up file for tests/test_resume.py: SIGKILL this kernel at a crash window.

The test copies it into a throwaway IPYTHONDIR, so only the kernels of that test run it.
`COURSE_TEST_KILL_AT` is `append:<step>` (the kernel dies right after the metrics line of
<step> is on disk) or `commit:<step>` (right after the run's state records <step> as done).
No cleanup handler, flush or atexit runs: a SIGKILL is what a crash looks like.
"""

import os
import signal

from helpers.runlog import RunLog

_event, _step = os.environ["COURSE_TEST_KILL_AT"].split(":")
_append, _commit = RunLog.append, RunLog.commit


def _append_then_maybe_die(self, record):
    _append(self, record)
    if _event == "append" and record["step"] == int(_step):
        os.kill(os.getpid(), signal.SIGKILL)


def _commit_then_maybe_die(self, **state):
    _commit(self, **state)
    if _event == "commit" and state.get("completed_steps") == int(_step) + 1:
        os.kill(os.getpid(), signal.SIGKILL)


RunLog.append, RunLog.commit = _append_then_maybe_die, _commit_then_maybe_die
