"""The sizes notebook 08's optional table states are the ones the code has: the local
sandbox's `ResourceLimits` defaults and the Sailbox size "s" from the SDK's size table."""

from __future__ import annotations

import sail

from local_stack.client.sailbox.isolation import ResourceLimits
from tests.notebook_source import cell, numbers


def table_row(first_column: str) -> str:
    source = cell("08_sandboxed_rollouts", "local-and-sailbox")
    [row] = [line for line in source.splitlines() if line.startswith(f"| {first_column} |")]
    return row


def test_the_local_limits_it_states_are_resource_limits_defaults() -> None:
    limits = ResourceLimits()
    local, sailbox = (numbers(column) for column in table_row("limits").split(" | ")[1:3])
    assert {
        limits.memory_bytes >> 30,
        limits.disk_bytes >> 20,
        limits.disk_files,
        limits.max_processes,
        limits.cpu_seconds,
        limits.address_space_bytes >> 30,
        limits.file_size_bytes >> 20,
    } <= local
    [small] = [size for size in sail.Sailbox._sizes() if size.size == "s"]
    assert {small.vcpus, small.memory_default_gib, small.disk_default_gib} <= sailbox


def test_the_containment_rows_overrun_the_limits_they_name() -> None:
    """The memory and disk rows ask together for more than the sandbox may hold, each
    process alone for less than its own limit."""
    limits = ResourceLimits()
    assert 200 << 20 < limits.address_space_bytes < 8 * (200 << 20)
    assert 8 * (200 << 20) > limits.memory_bytes
    assert 8 * 100 * (1 << 20) > limits.disk_bytes and (1 << 20) < limits.file_size_bytes
