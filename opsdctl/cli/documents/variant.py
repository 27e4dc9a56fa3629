"""The variant documents: one variant with every run (`opsdctl show`, the dashboard's variant
page), and the list of every variant (`opsdctl variants`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opsdctl.store.reader import Reader


def variant_doc(reader: Reader, ref: str) -> dict:
    """`opsdctl show REF --json`: the variant's recipe and every run (opsdctl.stats.scores.show_doc)."""
    from opsdctl.stats.scores import show_doc

    return show_doc(reader, ref)


def list_variants(reader: Reader) -> list[dict]:
    from opsdctl.recipes import partial
    from opsdctl.recipes.knobs import recipe_changes
    from opsdctl.store.states import State

    rows = []
    with reader.snapshot():
        for v in reader.all_variants():
            chains = reader.chains_of_variant(v.id)
            scored = [(c, reader.score_of(c.id)) for c in chains if c.state == State.SUCCEEDED.value]
            scored = [(c, x) for c, x in scored if x is not None]
            scores = [x.avg_at_k for c, x in scored if not partial.run_is_partial(c, x)]
            partial_scores = [{"chain_id": c.id, "score": x.avg_at_k, "n_problems": x.n_problems, "k": x.k}
                              for c, x in scored if partial.run_is_partial(c, x)]
            rows.append({
                "name": v.name,
                "version": v.version,
                "variant": v.label,
                "hash": v.hash,
                "description": v.description,
                "changes": recipe_changes(v.hparams, v.method),
                "chains": len(chains),
                "succeeded": sum(c.state == State.SUCCEEDED.value for c in chains),
                "queued": sum(c.state == State.QUEUED.value for c in chains),
                "scores": scores,  # full evaluations only
                "partial_scores": partial_scores,  # screening runs, kept apart
                "kind": v.kind,
                "source": v.source,
            })
    return rows


