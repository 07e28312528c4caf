"""The sizes notebook 07's optional table states are the ones the code has: the local
sandbox's `ResourceLimits` defaults and the Sailbox size "s" from the SDK's size table."""

from __future__ import annotations

from pathlib import Path

import nbformat
import sail

from local_stack.client.sailbox.isolation import ResourceLimits

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_sandboxed_rollouts.ipynb"


def table_row(first_column: str) -> str:
    [cell] = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.id == "local-and-sailbox"]
    [row] = [line for line in cell.source.splitlines() if line.startswith(f"| {first_column} |")]
    return row


def test_the_local_limits_it_states_are_resource_limits_defaults() -> None:
    limits = ResourceLimits()
    local, sailbox = table_row("limits").split(" | ")[1:3]
    assert f"{limits.memory_bytes >> 30} GiB memory (files included)" in local
    assert f"{limits.disk_bytes >> 20} MiB and {limits.disk_files:,} files on disk" in local
    assert f"{limits.max_processes} processes" in local
    assert f"{limits.cpu_seconds} s CPU" in local
    assert f"{limits.address_space_bytes >> 30} GiB address space" in local
    assert f"{limits.file_size_bytes >> 20} MiB per file" in local
    [small] = [size for size in sail.Sailbox._sizes() if size.size == "s"]
    assert f'"s" is {small.vcpus} vCPU, {small.memory_default_gib} GiB memory' in sailbox
    assert f"{small.disk_default_gib} GiB disk" in sailbox


def test_the_containment_rows_overrun_the_limits_they_name() -> None:
    """The memory and disk rows ask together for more than the sandbox may hold, each
    process alone for less than its own limit."""
    limits = ResourceLimits()
    assert 200 << 20 < limits.address_space_bytes < 8 * (200 << 20)
    assert 8 * (200 << 20) > limits.memory_bytes
    assert 8 * 100 * (1 << 20) > limits.disk_bytes and (1 << 20) < limits.file_size_bytes
