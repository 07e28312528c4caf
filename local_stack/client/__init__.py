"""The local stack's client side: what runs inside a Jupyter kernel (or a script), never in
the server process. The course imports the stack only from here.

    supervisor      find, start and stop the server process (one per storage dir)
    attach          a kernel joining the stack (`helpers.connect("local")`) and leaving it
    watch           stop the running cell when the server dies or stops answering
    control_client  set this kernel's latencies and faults, read the stack's counters
    tiny_model      the tiny model's shipped files, read in the kernel with no server, and
                    the metadata that names its adapter archive in a raw Sail request
    sailbox/        the stand-in for Sailboxes: each command under bubblewrap, in this process
    dataset         the stand-in for the cloud's dataset: arithmetic word problems, made offline

It shares `local_stack.config` (keys, host, storage dir) and `local_stack.registry` (who
uses the stack) with the server, and reaches the server only over HTTP.
"""
