"""Grading with --extract lenient (ours): the last well-formed box, then number / math-verify /
string equality. The default, released grading is tested in tests/integration/test_fidelity.py."""

import threading

import pytest

from eval.grading import grade, last_boxed, normalize

# (completion, gold, expected extracted answer, expected correct)
CASES = [
    # plain integers, AIME style
    ("The answer is \\boxed{33}.", "33", "33", True),
    ("\\boxed{033}", "33", "033", True),
    ("\\boxed{33}", "033", "33", True),
    ("\\boxed{33.0}", "33", "33.0", True),
    ("\\boxed{33.}", "33", "33.", True),
    ("\\boxed{0}", "0", "0", True),
    ("\\boxed{000}", "0", "000", True),
    ("\\boxed{34}", "33", "34", False),
    ("\\boxed{33.5}", "33", "33.5", False),
    ("\\boxed{ 204 }", "204", "204", True),
    ("\\boxed{+7}", "7", "+7", True),
    # negative numbers
    ("\\boxed{-5}", "-5", "-5", True),
    ("\\boxed{-5}", "5", "-5", False),
    ("\\boxed{-0.5}", "-\\frac{1}{2}", "-0.5", True),
    ("\\boxed{-\\frac{3}{4}}", "-0.75", "-\\frac{3}{4}", True),
    # thousands separators
    ("\\boxed{1,000}", "1000", "1,000", True),
    ("\\boxed{1{,}000}", "1000", "1{,}000", True),
    ("\\boxed{12,345,678}", "12345678", "12,345,678", True),
    ("\\boxed{1\\,000}", "1000", "1\\,000", True),
    ("\\boxed{1,000}", "100", "1,000", False),
    # fractions
    ("\\boxed{\\frac{1}{2}}", "0.5", "\\frac{1}{2}", True),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", "\\dfrac{1}{2}", True),
    ("\\boxed{\\tfrac{2}{4}}", "\\frac{1}{2}", "\\tfrac{2}{4}", True),
    ("\\boxed{\\frac12}", "0.5", "\\frac12", True),
    ("\\boxed{1/2}", "\\frac{1}{2}", "1/2", True),
    ("\\boxed{\\frac{2}{3}}", "\\frac{3}{2}", "\\frac{2}{3}", False),
    ("\\boxed{\\frac{66}{2}}", "33", "\\frac{66}{2}", True),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", True),
    # LaTeX wrappers
    ("\\boxed{\\text{33}}", "33", "\\text{33}", True),
    ("\\boxed{\\textbf{33}}", "33", "\\textbf{33}", True),
    ("\\boxed{\\mathrm{33}}", "33", "\\mathrm{33}", True),
    ("$\\boxed{33}$", "33", "33", True),
    ("$$\\boxed{33}$$", "33", "33", True),
    ("\\(\\boxed{33}\\)", "33", "33", True),
    ("\\boxed{$33$}", "33", "$33$", True),
    ("\\boxed{33^\\circ}", "33", "33^\\circ", True),
    ("\\boxed{33\\%}", "33", "33\\%", True),
    ("\\boxed{x = 33}", "33", "x = 33", True),
    ("\\boxed{n=33}", "33", "n=33", True),
    ("\\boxed{\\left(1, 2\\right)}", "(1,2)", "\\left(1, 2\\right)", True),
    ("\\boxed{\\text{(B)}}", "\\text{(B)}", "\\text{(B)}", True),
    # expressions math-verify proves equal
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", "2\\sqrt{2}", True),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{3}", "\\sqrt{2}", False),
    ("\\boxed{3\\pi}", "3\\pi", "3\\pi", True),
    ("\\boxed{2^{10}}", "1024", "2^{10}", True),
    ("\\boxed{10^3}", "1000", "10^3", True),
    # nesting and escaped braces
    ("\\boxed{\\frac{1}{\\frac{1}{2}}}", "2", "\\frac{1}{\\frac{1}{2}}", True),
    ("\\boxed{{33}}", "33", "{33}", True),
    ("\\boxed{\\boxed{33}}", "33", "33", True),
    ("\\boxed{\\{1, 2\\}}", "\\{1,2\\}", "\\{1, 2\\}", True),
    # several boxes: the last one counts
    ("\\boxed{12} no wait \\boxed{33}", "33", "33", True),
    ("\\boxed{33} no wait \\boxed{12}", "33", "12", False),
    ("first \\fbox{5} then \\boxed{7}", "7", "7", True),
    ("\\boxed{7} then \\fbox{5}", "5", "5", True),
    # other box spellings
    ("\\fbox{9}", "9", "9", True),
    ("so \\boxed 33$", "33", "33", True),
    ("so \\boxed 33", "33", "33", True),
    ("\\boxed   {33}", "33", "33", True),
    # no box / empty / malformed braces
    ("The answer is 33.", "33", None, False),
    ("", "33", None, False),
    ("\\boxed{}", "33", "", False),
    ("\\boxed{33", "33", None, False),
    ("\\boxed{\\frac{1}{2}", "0.5", None, False),
    ("\\boxed{12} and then \\boxed{33", "12", "12", True),
    ("\\boxedx{33}", "33", None, False),
    ("\\boxed", "33", None, False),
    ("\\boxed{33}}}", "33", "33", True),
    ("}}{{\\boxed{33}", "33", "33", True),
    # text around, thinking blocks
    ("<think>maybe \\boxed{1}</think>\n\nThe answer is \\boxed{2}.", "2", "2", True),
    ("Answer: \\boxed{\\text{thirty three}}", "33", "\\text{thirty three}", False),
    ("\\boxed{abc}", "33", "abc", False),
]


def test_table_is_big_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("completion,gold,extracted,correct", CASES)
def test_grade(completion, gold, extracted, correct):
    g = grade(completion, gold, "lenient")
    assert g.extracted == extracted
    assert g.correct is correct, g


@pytest.mark.parametrize("text,expected", [
    ("\\boxed{a{b}c}", "a{b}c"),
    ("\\boxed{\\}}", "\\}"),
    ("x \\fbox{1} y \\boxed{2} z", "2"),
    ("\\boxed{ 5 }", "5"),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("raw,expected", [
    ("\\text{33}", "33"), ("1,000", "1000"), ("\\dfrac{1}{2}", "\\frac{1}{2}"), ("x = 5", "5"),
    ("$33$", "33"), ("33.", "33"), ("1,00", "1,00"),
])
def test_normalize(raw, expected):
    assert normalize(raw) == expected


@pytest.mark.parametrize("mode", ["released", "lenient"])
def test_grading_off_the_main_thread_does_not_crash(mode):
    """math-verify's SIGALRM timeouts only work in the main thread; elsewhere they are switched off."""
    got = {}
    t = threading.Thread(target=lambda: got.update(g=grade("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", mode)))
    t.start()
    t.join()
    assert got["g"].correct
