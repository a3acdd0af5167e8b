"""The embedded reference worker: a vLLM-compatible paged-KV engine written in plain torch.

Cacheplane is developed and tested without GPUs or vLLM, yet its worker client, metrics
scraper and KV-event index must behave exactly as they will against production vLLM. This
package serves a small random-weight transformer behind vLLM's HTTP, Prometheus and ZMQ
KV-event surfaces, with real paged KV blocks, automatic prefix caching and LRU eviction, so
prefill compute is really saved on a hit and blocks are really evicted under pressure.

Nothing here imports Django: the worker runs as its own process (``cacheplane worker`` or
``python -m workers.engine.cli``) or in-process through :mod:`workers.engine.launcher`.
"""

#: What ``GET /version`` reports: the vLLM release whose protocol is followed, plus a local
#: version tag so clients that branch on the version can tell the reference worker apart.
VERSION = "0.28.0+cacheplane.ref"
