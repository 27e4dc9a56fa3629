"""Grading one completion against a gold answer: pure functions, importable anywhere.

Two extraction modes (`python -m eval --extract`):

- `released` (default): what the official evaluation script does (siyan-zhao/OPSD
  eval/evaluate_math.py, `extract_boxed_answer` and `grade_answer`), so avg@k is comparable with
  the published 54.22. The answer is the content of the LAST `\\boxed` occurrence, its braces
  matched by counting; a last box that never closes (a truncated completion) gives no answer,
  even if an earlier box was closed. The answer and the gold are wrapped in `$...$` (unless they
  hold a `$`), parsed by math-verify without fallback and checked with `verify(gold, answer)`;
  only if math-verify raises are their strings compared (spaces and `$` dropped, lower case).
- `lenient` (ours, opt-in): `last_boxed` takes the last WELL-FORMED box of `\\boxed{...}`,
  `\\fbox{...}` or `\\boxed 5`; `answers_match` accepts equal plain numbers ("033" = 33),
  then math-verify, then normalised strings.

math-verify bounds its parsing and checking time with SIGALRM, which only works in a process's
main thread; off the main thread the timeouts are switched off rather than crashing. The
evaluator grades in its worker processes' main threads.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

MV_TIMEOUT_S = 5  # per math-verify parse / verify call (the released script's value)
BOX_COMMANDS = ("\\boxed", "\\fbox")
EXTRACT_MODES = ("released", "lenient")
RELEASED_BOX = "\\boxed"


@dataclass(frozen=True)
class Grade:
    extracted: Optional[str]  # None: no complete box in the completion
    correct: bool
    how: str  # "number" | "math-verify" | "string" | "no-box" | "mismatch"


# --- extraction: released ------------------------------------------------------------------


def released_boxed(text: str) -> Optional[str]:
    """The released `extract_boxed_answer`: the last `\\boxed` only, or None.

    From that occurrence on, braces are counted (+1 for `{`, -1 for `}`, no escapes); the box
    ends where the count comes back to 0 after a `}`. No such point: None (unclosed). The span
    must read `\\boxed{...}` (so `\\boxed 5` is not an answer); its inside, stripped, is.
    """
    start = text.rfind(RELEASED_BOX)
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        ch = text[end]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                span = text[start: end + 1]
                opener = RELEASED_BOX + "{"
                return span[len(opener):-1].strip() if span.startswith(opener) else None
    return None


# --- extraction: lenient -------------------------------------------------------------------


def _braced(text: str, start: int) -> Optional[tuple[str, int]]:
    """(content, end) of the brace group opening at text[start] == '{'; None if it never closes.
    Escaped braces (\\{ \\}) do not count."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1: i], i + 1
        i += 1
    return None


def _box_at(text: str, pos: int, cmd: str) -> Optional[str]:
    """The argument of the box command at `pos`, or None if it is malformed."""
    i = pos + len(cmd)
    if i < len(text) and (text[i].isalpha()):  # \boxedfoo is another command
        return None
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        got = _braced(text, j)
        return None if got is None else got[0]
    if j > i:  # `\boxed 5`: the argument runs to whitespace, `$` or the end
        m = re.match(r"[^\s$]+", text[j:])
        return m.group(0) if m else None
    return None


def last_boxed(text: str) -> Optional[str]:
    """Content of the last well-formed box in `text` (stripped), or None."""
    hits = []
    for cmd in BOX_COMMANDS:
        start = 0
        while (pos := text.find(cmd, start)) != -1:
            hits.append((pos, cmd))
            start = pos + 1
    for pos, cmd in sorted(hits, reverse=True):
        got = _box_at(text, pos, cmd)
        if got is not None:
            return got.strip()
    return None


# --- normalisation ------------------------------------------------------------------------

_WRAPPERS = ("\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\textrm", "\\mbox", "\\operatorname")
_DROP = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "\\displaystyle", "~")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def _unwrap(s: str, cmd: str) -> str:
    """Replace every `cmd{x}` by `x` (brace-aware)."""
    while (pos := s.find(cmd + "{")) != -1:
        got = _braced(s, pos + len(cmd))
        if got is None:
            break
        s = s[:pos] + got[0] + s[got[1]:]
    return s


def normalize(ans: str) -> str:
    """A canonical string form: wrappers and spacing removed, \\dfrac -> \\frac, 1,000 -> 1000,
    a leading `x =` dropped, degrees/percent/trailing dots removed."""
    s = ans.strip()
    for a, b in (("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("$", "")):
        s = s.replace(a, b)
    for cmd in _WRAPPERS:
        s = _unwrap(s, cmd)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for tok in _DROP:
        s = s.replace(tok, "")
    s = s.replace("{,}", ",").replace("^\\circ", "").replace("^{\\circ}", "").replace("\\circ", "")
    s = s.replace("\\%", "").replace("%", "")
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"^[A-Za-z]\w*=", "", s)  # "x=33", "n=33"
    s = s.rstrip(".")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s


def as_number(s: str) -> Optional[Fraction]:
    """A normalised string that is a plain decimal number (optionally signed), else None."""
    if re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)", s):
        return Fraction(s)
    m = re.fullmatch(r"([-+]?)\\frac(?:\{(\d+)\}|(\d))(?:\{(\d+)\}|(\d))", s) or re.fullmatch(
        r"([-+]?)(\d+)()/(\d+)()", s)
    if m:
        num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        if den:
            return Fraction(-num if m.group(1) == "-" else num, den)
    return None


# --- math-verify --------------------------------------------------------------------------


def _math_verify(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    timeout = MV_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        g = parse("\\boxed{" + gold + "}", parsing_timeout=timeout)
        p = parse("\\boxed{" + pred + "}", parsing_timeout=timeout)
        if not g or not p:
            return False
        return bool(verify(g, p, timeout_seconds=timeout))
    except Exception:  # math-verify raising (or timing out) means "not shown equal"
        return False


def _dollars(s: str) -> str:
    return s if "$" in s else f"${s}$"


def _loose(s: str) -> str:
    return s.replace("$", "").replace(" ", "").lower().strip()


def released_match(gold: str, pred: str) -> tuple[bool, str]:
    """The released `grade_answer`: math-verify on `$...$`-wrapped strings, no fallback parsing;
    a string comparison only when math-verify raises."""
    from math_verify import parse, verify

    timeout = MV_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    g, p = _dollars(gold), _dollars(pred)
    try:
        ok = verify(parse(g, fallback_mode="no_fallback", parsing_timeout=timeout),
                    parse(p, fallback_mode="no_fallback", parsing_timeout=timeout), timeout_seconds=timeout)
        return bool(ok), "math-verify" if ok else "mismatch"
    except Exception:  # as released: math-verify failing falls back to comparing the strings
        ok = _loose(p) == _loose(g)
        return ok, "string" if ok else "mismatch"


def answers_match(gold: str, pred: str) -> tuple[bool, str]:
    ng, np_ = normalize(gold), normalize(pred)
    xg, xp = as_number(ng), as_number(np_)
    if xg is not None and xp is not None:
        return xg == xp, "number" if xg == xp else "mismatch"
    if _math_verify(gold, pred):
        return True, "math-verify"
    if ng and ng == np_:
        return True, "string"
    return False, "mismatch"


def grade(completion: str, gold: str, extract: str = "released") -> Grade:
    """Grade one completion: extract its answer and compare it with the gold answer."""
    if extract == "released":
        extracted = released_boxed(completion)
        if extracted is None:
            return Grade(None, False, "no-box")
        ok, how = released_match(str(gold), extracted)
        return Grade(extracted, ok, how)
    if extract != "lenient":
        raise ValueError(f"extract {extract!r}: must be one of {', '.join(EXTRACT_MODES)}")
    extracted = last_boxed(completion)
    if extracted is None or extracted == "":
        return Grade(extracted, False, "no-box")
    ok, how = answers_match(str(gold), extracted)
    return Grade(extracted, ok, how)
