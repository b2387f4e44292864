"""`companion`: chat, run, doctor, web-login, passphrase, backup, restore, report."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="companion", description="A personal AI companion whose private mode is a wall, not a badge."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("chat", help="talk with the companion in this terminal (works piped: one line a message)")
    sub.add_parser("run", help="run the gateway: every configured platform adapter and the scheduler")
    backup = sub.add_parser("backup", help="write a snapshot without any private row; prune old backups")
    backup.add_argument("path", help="a folder (recommended; ends with / or exists) or a file name")
    restore = sub.add_parser(
        "restore",
        help="replace the database with a backup (stop the gateway first); on PostgreSQL, no PATH: run it after "
        "restoring your own backup",
    )
    restore.add_argument("path", nargs="?")
    sub.add_parser("report", help="print the structural report of normal turns (counts, errors, latencies; no text)")
    web_login = sub.add_parser(
        "web-login", help="print a one-time sign-in link for the web (valid 10 minutes, works once)"
    )
    web_login.add_argument(
        "--url", help="the address browsers use, when it is not the one listened on (https://companion.example.com)"
    )
    sub.add_parser(
        "doctor", help="check the model server, tokens and database that are configured, and say what to change"
    )
    sub.add_parser(
        "passphrase", help="read a passphrase on stdin and print the hash for COMPANION_PRIVATE_PASSPHRASE_HASH"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "passphrase":
        return _passphrase()

    from bot.logs import configure_logging
    from bot.settings import ConfigError, load_settings
    from core.values.errors import CompanionError

    try:
        settings = load_settings()
    except ConfigError as exc:
        if args.command == "doctor":  # the doctor's answer to a bad setting is a line of its report
            print(
                f"companion doctor\n\nsettings\n  FAIL  {exc}\n\n1 problem: correct it, then run `companion doctor` again."
            )
            return 1
        print(f"companion: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "doctor":
        # Its report says what a warning would (a refused image, a retry); DEBUG and INFO still log.
        configure_logging(settings.log_level if settings.log_level in ("DEBUG", "INFO") else "ERROR")
        return asyncio.run(_doctor(settings))
    configure_logging(settings.log_level)
    try:
        if settings.database_url is None:  # on PostgreSQL the SQLite path is not used
            # Before any lock file, folder or journal is created: a bad path changes nothing on disk.
            _check_db_path(settings.db_path, must_be_sqlite=args.command != "restore")
        if args.command == "chat":
            from bot.bootstrap import run_terminal_chat

            return asyncio.run(run_terminal_chat(settings))
        if args.command == "report":
            return asyncio.run(_report(settings))
        if args.command == "web-login":
            return asyncio.run(_web_login(settings, args.url))
        if args.command in ("backup", "restore"):
            return _backup_or_restore(settings, args.command, args.path)
        from bot.gateway import run_gateway

        return asyncio.run(run_gateway(settings))
    except (CompanionError, ConfigError) as exc:
        print(f"companion: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 0


_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_db_path(path: Path, *, must_be_sqlite: bool) -> None:
    """One line naming COMPANION_DB_PATH when the database cannot be used; nothing is created.

    Raises:
        ConfigError: the folder is missing its write permission or is a file, or the file is
            not an SQLite database (`restore` may replace a file that is not).
    """
    import os

    from bot.settings import ConfigError

    text = str(path)
    if text in ("", ":memory:") or text.startswith("file:"):
        return
    if path.is_dir():
        raise ConfigError(f"COMPANION_DB_PATH: {path} is a folder; name a database file in it")
    if path.exists():
        try:
            with path.open("rb") as file:
                head = file.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise ConfigError(f"COMPANION_DB_PATH: cannot read {path} ({exc.strerror})") from None
        if must_be_sqlite and head and head != _SQLITE_HEADER:
            raise ConfigError(f"COMPANION_DB_PATH: {path} is not an SQLite database; nothing was changed")
        if not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(f"COMPANION_DB_PATH: {path} is not writable")
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folders to be created: the nearest existing one must take them
    if not folder.is_dir():
        raise ConfigError(f"COMPANION_DB_PATH: {folder} is not a folder, so {path} cannot be created")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"COMPANION_DB_PATH: the folder {folder} is not writable")


def _backup_or_restore(settings, command: str, where: str | None) -> int:
    from bot.bootstrap import backup, restore

    if where is None:  # `restore` alone may leave out PATH (PostgreSQL; on SQLite it says what is missing)
        restored = restore(settings, None)
        if restored is not None:
            print(
                f"made the restored database ready: {restored.sign_ins} web sign-ins, {restored.segments} expired "
                f"private intervals and {restored.artifacts} expired artifacts deleted; {restored.keyless} intervals "
                "without their key masked"
            )
        return 0
    path = Path(where)
    if command == "backup":
        folder = where.endswith(("/", "\\")) or path.is_dir() or not path.suffix
        result = backup(settings, path, folder=folder)
        print(
            f"backup written to {result.path} ({result.size} bytes, no private rows); "
            f"{len(result.pruned)} backups older than {settings.backup_retention_days:g} days pruned"
        )
        return 0
    restore(settings, path)
    print(f"restored {path} into {settings.db_path}; private rows dropped and expiry applied")
    return 0


async def _report(settings) -> int:
    from bot.bootstrap import report

    print(await report(settings))
    return 0


async def _web_login(settings, url: str | None) -> int:
    from bot.bootstrap import issue_web_login

    link, valid = await issue_web_login(settings, url)
    print(link)
    print(f"Open it within {int(valid // 60)} minutes, in the browser to sign in; it works once.", file=sys.stderr)
    return 0


async def _doctor(settings) -> int:
    from bot.doctor import diagnose

    # No lock and no store: the doctor reads the database read-only beside a running gateway.
    report = await diagnose(settings, check_path=_check_db_path)
    print(report.render())
    return 1 if report.problems else 0


def _passphrase() -> int:
    import getpass

    from core.privacy.secrets import hash_passphrase

    if sys.stdin.isatty():
        first = getpass.getpass("Passphrase: ")
        if getpass.getpass("Again: ") != first:
            print("companion: the two passphrases differ; nothing printed", file=sys.stderr)
            return EXIT_CONFIG
    else:
        first = sys.stdin.readline().rstrip("\r\n")
    if not first or any(ch.isspace() for ch in first):
        print("companion: the passphrase must be one non-empty word (no spaces)", file=sys.stderr)
        return EXIT_CONFIG
    print(hash_passphrase(first))
    return 0
