"""The local stack: loopback stand-ins for Tinker and Sail, as LocalStack is for AWS.

The real `tinker` and `sail` SDKs talk to it unchanged over HTTP on one 127.0.0.1 port. The
course reaches it only through `helpers.backend` (`connect("local")` and the calls that
read the tiny model) and `shell_tasks.sandboxes` (notebook 07's local sandbox).

    config       keys, host, storage directory and every environment variable it reads
    supervisor   starts and stops the server process (the client side; servers never import it)
    kernel_watch in a kernel that uses the stack: stops the running cell if the server dies
    app          the one aiohttp app: mounts each service's sub-app and `/healthz`
    http         the one handler style: auth and error mapping as a per-service middleware
    tinker/      the Tinker API: routes -> requests -> service -> wire (protobuf)
    sail/        the Sail Responses API: routes -> requests -> service, batcher, adapters -> wire
    control/     the control plane for tests and demos (latency, faults, seed, stats), keyed
    engine/      what both services compute with: the tiny model, its vocabulary, the sampler,
                 the LoRA trainer, checkpoints on disk, the one compute thread
    sandbox/     the stand-in for Sailboxes: each command under bubblewrap
    dataset      the offline arithmetic set the local backend reads instead of orca-math

It shares the model's name and offline tokenizer with the course through `kimi`, a package
of its own, and imports nothing from the course: the sandbox is told a task's working
directory by its caller, and the tiny model's base weights ship built
(`scripts/build_tiny_base.py`, which teaches it the course's task, rebuilds them).
"""
