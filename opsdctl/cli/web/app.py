"""The dashboard's pages (Starlette): session, compare, a variant, a chain; read-only.

Each page is built from the very document its command prints with `--json` (opsdctl.cli.documents:
status, compare, variant, chain; this package imports no command module) and `?format=json`
returns that document as it is, so the page and the CLI cannot show different numbers.
`?fragment=1` returns the page's body only: the page's script asks `/changes` every 2 s whether
the store moved and, when it did, swaps the body in place (no reload). With a token, every request must carry it (`?token=`, which also sets
a cookie, or `Authorization: Bearer`).
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
from pathlib import Path
from typing import Callable, Optional

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from opsdctl.cli.web import svg
from opsdctl.errors import UserError
from opsdctl.store import queries

TEMPLATES = Path(__file__).resolve().parent / "templates"
COOKIE = "opsdctl_token"
# A variant's page lists its latest runs and draws the curves of the latest few (a variant of a
# long session can have a thousand runs); its ?format=json twin holds every run.
RUNS_SHOWN = 100
CURVES_SHOWN = 12
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def fmt_s(seconds) -> str:
    if seconds is None or isinstance(seconds, Undefined):
        return "-"
    from opsdctl.plan.budget import fmt_duration

    return fmt_duration(max(0.0, float(seconds)))


def _json_response(doc) -> Response:
    """The document `--json` prints (json.dumps(default=str)), without its indentation, in one pass."""
    return Response(json.dumps(doc, default=str, separators=(",", ":")), media_type="application/json")


class Pages:
    """`cfg`, `reader()`: a fresh light reader per request (every page reads through it), and the
    store's `safe_url` (no password) the pages name."""

    def __init__(self, cfg, reader: Callable[[], object], safe_url: str):
        self.cfg, self.reader, self.safe_url = cfg, reader, safe_url
        self.env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
        self.env.globals.update(fmt_s=fmt_s, strip=svg.problem_strip)
        # a key a document leaves out (a chain that never started has no elapsed time) reads as none
        self.env.tests["none"] = lambda value: value is None or isinstance(value, Undefined)

    # documents: the CLI's own builders -------------------------------------------------------

    def _read(self, build: Callable[[object], dict]) -> dict:
        """`build(reader)` on a fresh reader, closed after."""
        reader = self.reader()
        try:
            return build(reader)
        finally:
            reader.close()

    def session_doc(self, request: Request) -> dict:
        from opsdctl.cli.documents.status import gather_status

        recent = request.query_params.get("recent", "10")
        if not recent.isdigit():
            raise UserError(f"recent={recent!r}: must be a whole number of finished chains, e.g. ?recent=10")
        return self._read(lambda reader: gather_status(self.cfg, reader, int(recent)))

    def compare_doc(self, request: Request) -> dict:
        from opsdctl.cli.documents.compare import compare_document

        q = request.query_params
        return self._read(lambda reader: compare_document(
            self.cfg, reader, q.getlist("variant") or None, q.get("baseline"), q.get("family"),
            q.get("pool_code") in ("1", "true")).to_json())  # the page's document

    def variant_doc(self, request: Request) -> dict:
        from opsdctl.cli.documents.variant import variant_doc

        return self._read(lambda reader: variant_doc(reader, request.path_params["ref"]))

    def chain_doc(self, request: Request) -> dict:
        from opsdctl.cli.documents.chain import chain_doc

        return self._read(lambda reader: chain_doc(reader, request.path_params["chain_id"]))

    # views: what each template needs besides the document ------------------------------------

    def session_view(self, doc: dict) -> dict:
        chains = doc["chains"]
        lanes: dict[str, list[dict]] = {}
        now = dt.datetime.now(dt.timezone.utc).timestamp()
        starts = []
        for c in chains:
            for st in c.get("stages") or []:
                if not st.get("started_at"):
                    continue
                a = dt.datetime.fromisoformat(st["started_at"]).timestamp()
                b = dt.datetime.fromisoformat(st["finished_at"]).timestamp() if st.get("finished_at") else now
                lane = f"GPU {st['gpus']}" if st.get("gpus") else "no GPU"
                lanes.setdefault(lane, []).append({"start": a, "end": b, "state": st["state"],
                                                   "label": f"chain {c['chain_id']} {c['variant']} {st['name']} ({st['state']})"})
                starts.append(a)
        return {
            "running": [c for c in chains if c["state"] == "running"],
            "queued": [c for c in chains if c["state"] == "queued"],
            "finished": [c for c in chains if c["state"] not in ("running", "queued")],
            "plan": {e["chain_id"]: e for e in (doc.get("planner") or {}).get("timeline", [])},
            "gpu_timeline": svg.timeline(dict(sorted(lanes.items())), min(starts), now) if starts else None,
        }

    def compare_view(self, doc: dict) -> dict:
        entries = doc.get("variants", [])
        full = [e for e in entries if not e.get("partial")]
        lo, hi = svg.axis_range([x for e in full for x in (e.get("ci_low"), e.get("ci_high"), e.get("delta"))])
        from opsdctl.cli.cells import settle_cell

        return {"full": full, "partial": [e for e in entries if e.get("partial")], "settle": settle_cell,
                "bar": lambda e: svg.interval_bar(e.get("ci_low"), e.get("ci_high"), e.get("delta"), lo, hi)}

    def variant_view(self, doc: dict) -> dict:
        from opsdctl.recipes.knobs import recipe_changes

        runs = doc["runs"]
        drawn = [r for r in runs if (r.get("train") or {}).get("curve")][-CURVES_SHOWN:]
        return {"panels": svg.curve_panels(drawn, svg.curve_keys(drawn)), "shown": runs[-RUNS_SHOWN:],
                "changes": recipe_changes(doc.get("hparams") or {}, doc.get("method") or {})}

    def chain_view(self, doc: dict) -> dict:
        runs = [doc["run"]]
        return {"panels": svg.curve_panels(runs, svg.curve_keys(runs))}

    # plumbing -------------------------------------------------------------------------------

    def page(self, name: str, title: Callable[[dict], str], build, view):
        async def endpoint(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            try:
                doc = await run_in_threadpool(build, request)
            except UserError as exc:
                # a variant or chain that is not there is "not found"; a bad query parameter is bad input
                return PlainTextResponse(str(exc), status_code=404 if request.path_params else 400)
            if request.query_params.get("format") == "json":
                return _json_response(doc)
            ctx = {"doc": doc, **view(doc)}
            body = self.env.get_template(f"{name}.html").render(ctx)
            if request.query_params.get("fragment"):
                return HTMLResponse(body)
            return HTMLResponse(self.env.get_template("base.html").render(
                title=title(doc), page=name, body=Markup(body), store=self.safe_url,
                generated=dt.datetime.now().strftime("%H:%M:%S")))

        return endpoint

    async def changes(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        def version(reader) -> str:
            # what moves when the worker does something: a transition, a score, a chain, a stage's progress
            return json.dumps([list(reader.tuples(queries.STORE_CHANGES)[0]), reader.tuples(queries.RUNNING_PROGRESS)],
                              default=str)

        return JSONResponse({"version": await run_in_threadpool(self._read, version)})


def _token_guard(app, token: str):
    """ASGI middleware: every request carries the token, or gets 401."""
    expected = token.encode()

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        request = Request(scope)
        given = (request.query_params.get("token") or request.cookies.get(COOKIE)
                 or request.headers.get("authorization", "").removeprefix("Bearer ").strip())
        if not given or not hmac.compare_digest(given.encode(), expected):
            return await PlainTextResponse("401: this dashboard needs its token (?token=...)", status_code=401)(
                scope, receive, send)
        if request.query_params.get("token"):
            async def send_with_cookie(message):
                if message["type"] == "http.response.start":
                    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                    message.setdefault("headers", []).append((b"set-cookie", cookie.encode()))
                await send(message)

            return await app(scope, receive, send_with_cookie)
        return await app(scope, receive, send)

    return guarded


def make_app(cfg, reader: Callable[[], object], safe_url: str, token: Optional[str] = None):
    p = Pages(cfg, reader, safe_url)
    app = Starlette(routes=[
        Route("/", p.page("session", lambda d: "session", p.session_doc, p.session_view)),
        Route("/compare", p.page("compare", lambda d: "compare", p.compare_doc, p.compare_view)),
        Route("/variant/{ref:path}", p.page("variant", lambda d: d["variant"], p.variant_doc, p.variant_view)),
        Route("/chain/{chain_id:int}", p.page("chain", lambda d: f"chain {d['chain_id']}", p.chain_doc, p.chain_view)),
        Route("/changes", p.changes),
    ])
    if token:
        return _token_guard(app, token)
    # Without a token the server is on loopback: refuse other Host names, so a web page that
    # rebinds its own name to 127.0.0.1 cannot read the dashboard from the user's browser.
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    return TrustedHostMiddleware(app, allowed_hosts=LOOPBACK_HOSTS)
