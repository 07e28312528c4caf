"""The loopback Tinker service, split by layer as API emulators such as moto split theirs.

- `routes`: HTTP only. Mounts the API sub-app (`/api/v1`, keyed) and the archive downloads
  (`/tinker/archives`, the signed-URL stand-in); each handler parses, calls, encodes.
- `requests`: request bodies in, checked plain values out (every 400 a request earns by
  itself is raised here).
- `state`: sessions, training runs, futures and checkpoints, each with its owner, and who
  may see or change them (RestClient's checkpoint calls included); knows nothing of HTTP.
- `service`: the training work on that state: runs built, their requests queued in order
  and computed, within each client's quotas.
- `futures`: the futures the SDK polls and the per-model `seq_id` order.
- `wire`: forward_backward's protobuf, decoded and encoded.
"""
