"""The local stack: loopback stand-ins for Tinker and Sail, as LocalStack is for AWS.

The real `tinker` and `sail` SDKs talk to it unchanged over HTTP on one 127.0.0.1 port. Two
processes use this package: the server (everything but `client/`), and each kernel or script
that uses the stack (`client/`, the services' client side). The course imports only
`local_stack.client`, and only from `helpers.backend` (`connect("local")` and the calls that
read the tiny model) and `shell_tasks.sandboxes` (notebook 08's local sandbox).

    client/      what runs in a kernel, never in the server: the supervisor that starts and
                 stops the server, the watch that stops a cell when it dies, the control
                 client, the tiny model's files, and the stand-in for Sailboxes (`sailbox/`)
    config       keys, host, storage dir and every environment variable it reads (both sides)
    registry     which processes use the stack, kept in the storage dir (both sides)
    app          the one aiohttp app: mounts each service's sub-app and `/healthz`
    http         the one handler style: auth and error mapping as a per-service middleware
    tinker/      the Tinker API: routes -> requests -> service, state -> wire (protobuf)
    sail/        the Sail Responses API: routes -> requests -> service, batcher, adapters -> wire
    control/     the control plane for tests and demos (latency, faults, seed, stats), keyed
    engine/      what both services compute with: the tiny model, its vocabulary, the sampler,
                 the LoRA trainer, checkpoints on disk, the one compute thread
    idle, guard  stop once nobody needs it; keep what one kernel sends from harming another

It shares the model's name and offline tokenizer with the course through `kimi`, a package
of its own, and imports nothing from the course: the sandbox is told a task's working
directory by its caller, and the tiny model's base weights ship built
(`scripts/build_tiny_base.py`, which teaches it the course's task, rebuilds them).
"""
