"""A fresh SQLite store holding one variant and one chain (id 1) in a given state: what the
transition tests start from."""

from __future__ import annotations


def store_with_one_chain(tmp_path, state: str):
    from opsdctl.store.engine import open_store
    from opsdctl.store.models import Chain, Variant

    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    with store.write() as s:
        v = Variant(name="v", version=1, hash="h")
        s.add(v)
        s.flush()
        s.add(Chain(variant_id=v.id, state=state))
    return store
