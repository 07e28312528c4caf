"""The loopback Tinker service, split by layer as API emulators such as moto split theirs.

- `routes`: HTTP only. Mounts the API sub-app (`/api/v1`, keyed) and the archive downloads
  (`/tinker/archives`, the signed-URL stand-in); each handler parses, calls, encodes.
- `requests`: request bodies in, checked plain values out (every 400 a request earns by
  itself is raised here).
- `service`: sessions, training models, queued work and checkpoints; knows nothing of HTTP.
- `futures`: the futures the SDK polls and the per-model `seq_id` order.
- `wire`: forward_backward's protobuf, decoded and encoded.
"""
