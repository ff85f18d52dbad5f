"""Both command lines' entry: a usage error (an unknown option or command, a missing or bad argument) in one line.

Click prints a usage error as three lines (usage, a hint, the error) or, with rich installed, a boxed panel;
``routestats`` and ``python -m runners`` promise one line and exit code 2 for every user error. :func:`run_app`
runs a Typer app so that its usage errors read like its other errors::

    error: No such option: --bogus (Possible options: --figures, --out); see 'routestats report --help'
"""

from __future__ import annotations

import sys

__all__ = ["printable", "run_app", "run_console", "usage_line", "version_option"]


def printable(text) -> str:
    """``text`` safe to print on a terminal: every control character (a run id or path read from an untrusted run
    directory can hold ESC sequences that retitle the terminal or clear the screen) written as its escape, newlines
    and tabs too: call it on each line or cell, before joining the lines the program prints.

    >>> print(printable("run\\x1b]0;owned\\x07-1"))
    run\\x1b]0;owned\\x07-1
    >>> printable("seed 1 · Δ")
    'seed 1 · Δ'
    """
    import unicodedata

    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() or ch == " " else
                   (repr(ch)[1:-1] if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn")
                    else ch) for ch in s)


def usage_line(exc) -> str:
    """The one line a click usage error prints: its message, then where the help is.

    >>> import typer
    >>> from typer.main import get_command
    >>> app = typer.Typer()
    >>> @app.command()
    ... def report(path: str): ...
    >>> try:
    ...     get_command(app).main(args=["--bogus"], prog_name="routestats report", standalone_mode=False)
    ... except Exception as exc:
    ...     print(usage_line(exc))
    error: No such option: --bogus; see 'routestats report --help'
    """
    where = f"; see '{exc.ctx.command_path} --help'" if getattr(exc, "ctx", None) is not None else ""
    return f"error: {' '.join(exc.format_message().split()).rstrip('.')}{where}"


def run_app(app, args: list[str] | None = None, prog: str | None = None) -> None:
    """Run the Typer ``app`` on ``args`` (default: the command line) and exit with its code; a usage error is one
    line on stderr and exit code 2; a bare command group shows its help. ``prog``: the program's name in
    messages (default: as click detects it)."""
    import typer
    from typer.main import get_command

    usage, click_error, no_args = _click_errors()
    try:
        code = get_command(app).main(args=args, prog_name=prog, standalone_mode=False)
    except no_args as exc:  # `routestats` alone: its help, as before
        typer.echo(exc.ctx.get_help())
        code = 2
    except usage as exc:
        typer.echo(usage_line(exc), err=True)
        code = 2
    except click_error as exc:
        typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        code = exc.exit_code
    except typer.Abort:
        typer.echo("interrupted", err=True)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


def run_console(app) -> None:
    """:func:`run_app` as a console script's whole process: when it is done, its objects are frozen (:func:`gc.freeze`),
    so that the collections at exit, which scanned every object the imports made (0.05 s CPU after a report), skip
    them; the operating system frees them with the process. Not for a process that goes on (a test's)."""
    import gc

    try:
        run_app(app)
    finally:
        gc.freeze()


def _click_errors() -> tuple:
    """(UsageError, ClickException, NoArgsIsHelpError or ()) of the click Typer runs on: Typer 0.29 carries its
    own copy of click, whose classes ``import click`` does not name."""
    import typer

    mro = {c.__name__: c for c in typer.BadParameter.__mro__}
    return mro["UsageError"], mro["ClickException"], getattr(sys.modules[mro["UsageError"].__module__],
                                                              "NoArgsIsHelpError", ())


def version_option(app, name: str) -> None:
    """Give the Typer ``app`` a ``--version`` option that prints ``name`` and the package's version (both command
    lines: ``routestats --version``, ``python -m runners --version``); the app keeps its own help text."""
    import typer

    def show(value: bool) -> None:
        if value:
            from routestats import __version__

            typer.echo(f"{name} {__version__}")
            raise typer.Exit()

    @app.callback(help=app.info.help)
    def _options(version: bool = typer.Option(False, "--version", callback=show, is_eager=True,
                                              help="Print the version and exit.")) -> None:
        pass
