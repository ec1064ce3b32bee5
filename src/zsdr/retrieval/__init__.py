"""Dense retrieval: encode corpus shards and queries (:mod:`.encode`), exact sharded search (:mod:`.exact`),
the search scattered over one job per shard (:mod:`.scatter`), the search jobs and their CLI (:mod:`.search`).

Names are imported lazily, so ``from zsdr.retrieval.search import register_cli`` does not load torch.
"""

from importlib import import_module

_NAMES = {
    "encode_corpus_shard": "encode", "encode_queries_file": "encode", "load_embeddings": "encode",
    "open_embeddings": "encode", "read_ids": "encode", "read_meta": "encode",
    "encode_search": "search", "register_cli": "search", "search_folders": "search", "search_shards": "exact",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f"zsdr.retrieval.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'zsdr.retrieval' has no attribute {name!r}")
