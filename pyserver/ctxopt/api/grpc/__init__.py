"""The gRPC front: `server` (bootstrap, health, reflection, shutdown),
`interceptors` (request decoding, bearer tokens and the owner of each call, in
their installed order), `service` (the servicer) and `convert` (proto <-> model)."""
