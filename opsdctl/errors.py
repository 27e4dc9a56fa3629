"""One error type for everything a user can get wrong.

A UserError is rendered as a single line (what, where, why, how to fix) and exits with code 2;
the store is never touched after one is raised.
"""

EXIT_USER_ERROR = 2


def one_line(text: str) -> str:
    """`text` with newlines and other control characters as visible escapes (\\n, \\x1b): an
    error stays one line whatever file name, key or recipe name it quotes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class UserError(Exception):
    """Bad input from the user: a config, a recipe, a command-line value."""

    def __init__(self, message: str):
        message = one_line(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class EnvironmentProblem(UserError):
    """The machine refused, not the input: a full disk, a read-only file system, a permission.
    One line and exit 2 as any UserError; the worker stops on one instead of failing every
    queued chain in turn (each would meet the same wall)."""
