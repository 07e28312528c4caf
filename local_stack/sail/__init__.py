"""The loopback Sail Responses API, split by layer as API emulators such as moto do it.

It speaks exactly the subset `sail.SailTokenCompleter` uses (raw prompt tokens in, token ids
and logprobs out), so the real SDK runs unchanged against the tiny local model, plus the
LoRA upload flow of Sail's documentation (files, then a named LoRA), which has no SDK calls.

    routes           HTTP only: the `/v1` sub-app, auth and error mapping via local_stack.http
    requests         a create body -> checked plain values (`SamplingRequest`), or a 4xx
    service          responses and their state; no HTTP
    batcher          concurrent requests decoded together on the compute thread
    adapters         LoRA adapters: checked, applied with PEFT, cached by source URL
    adapter_archive  bounded, loopback-only download and unpacking of adapter archives
    wire             the Responses API body shapes
    files            uploaded files (multipart, purpose `lora`), bounded, in memory
    loras            named LoRAs made of two uploaded files, validated per model

Latency, faults and the seed are knobs of the control plane (`local_stack.control`).
"""
