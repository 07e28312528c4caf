"""A pytest plugin for `make mutants` only (pyproject.toml's [tool.mutmut] loads it with -p).

mutmut runs each mutant in a process forked from one that has collected the tests. Building
the offline Kimi renderer here, once, before that fork, spares every mutant's test session
the seconds it takes (`kimi.offline_kimi_tokenizer` keeps it for the process)."""

from kimi import offline_kimi_renderer

offline_kimi_renderer()
