"""A guard against a CPython 3.11 bug that can kill a pytest process (installed by the root
conftest.py, so every pytest-xdist worker has it)."""

from __future__ import annotations

import ast
import gc
import sys
import threading


def guard_ast_parse() -> None:
    """Make `ast.parse` run with the garbage collector held off, one call at a time.

    CPython before 3.11.8 (gh-106905) keeps the AST constructor's recursion depth in one
    global: a collection during a parse can run a finalizer that parses too (pytest's
    unraisable-exception hook formats a traceback, and 3.11's tracebacks parse source for their
    carets), or let another thread parse, and the outer parse then fails with "SystemError: AST
    constructor recursion depth mismatch". Inside pytest's rendering of a failed test that is
    an INTERNALERROR that ends the worker (seen once in tests/course/test_interrupts.py, whose
    kernel clients leave garbage behind).
    """
    if sys.version_info >= (3, 11, 8) or getattr(ast.parse, "guarded", False):
        return
    parse = ast.parse
    lock = threading.RLock()

    def parse_alone(*args, **kwargs):
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    parse_alone.guarded = True
    ast.parse = parse_alone
