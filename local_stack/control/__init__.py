"""The local stack's control plane: test knobs and counters, apart from the emulated services.

`knobs` holds injected latencies, faults and the sampling seed; `routes` serves them at
`/local/config` (GET, POST) and the services' counters at `/local/stats`, behind the Sail key;
tests, benchmarks and kernels call them through `local_stack.client.control_client`. No real
service has these routes, so nothing in the emulations serves them.
"""
