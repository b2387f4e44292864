"""Run the benchmarks, print a Markdown table and write bench/results/latest.json.

python -m bench.run            # the full run (about four minutes on two cores)
python -m bench.run --quick    # a smoke run with small sizes (under a minute)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    assembly,
    cli_run,
    gateway_rss,
    load,
    mirror,
    request_size,
    roundtrip,
    streaming,
    triage,
    turn,
    web_turn,
)
from bench._common import ROOT, environment

MEASUREMENTS = {
    "turn": turn.run,
    "assembly": assembly.run,
    "cli": cli_run.run,
    "request": request_size.run,
    "gateway": gateway_rss.run,
    "roundtrip": roundtrip.run,
    "load": load.run,
    "mirror": mirror.run,
    "triage": triage.run,
    "web": web_turn.run,
    "streaming": streaming.run,
}


def _status(ok: bool | None, bad: str = "OVER") -> str:
    return "skipped" if ok is None else ("ok" if ok else bad)


def _size_label(n: int | str) -> str:
    n = int(n)
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else str(n)


def table(results: dict) -> list[str]:
    rows = [
        "| # | Measurement | Result | Baseline (same run) | Ratio | Target | Status |",
        "|---|---|---|---|---|---|---|",
    ]

    def add(*cells: object) -> None:
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")

    def failed(number: int, name: str, key: str) -> bool:
        result = results.get(key)
        if result is None:
            return True
        if "error" in result:
            add(number, name, "error: " + result["error"].splitlines()[-1][:80], "", "", "", "error")
            return True
        if result.get("status") in ("skipped", "failed"):
            add(number, name, result["note"], "", "", "", result["status"])
            return True
        return False

    if not failed(1, "Per-turn core overhead", "turn"):
        t = results["turn"]
        add(
            1,
            f"`Companion.handle()` per turn, median of {t['turns']}",
            f"{t['core_median_ms']:.2f} ms",
            f"bare SQLite turn {t['baseline_median_ms']:.2f} ms",
            f"{t['ratio_median']:.2f}×",
            f"< {t['target_ratio']:g}×",
            _status(t["ok"]),
        )
        add(
            1,
            "… p95",
            f"{t['core_p95_ms']:.2f} ms",
            f"{t['baseline_p95_ms']:.2f} ms",
            f"{t['ratio_p95']:.2f}×",
            "",
            "info",
        )
    if not failed(2, "Context assembly", "assembly"):
        a = results["assembly"]
        small, large = _size_label(a["sizes"][0]), _size_label(a["sizes"][-1])
        for case, c in a["cases"].items():
            sizes = " · ".join(f"{_size_label(n)}: {v:.2f} ms" for n, v in c["median_ms_by_size"].items())
            label = case[0].upper() + case[1:] if case == assembly.TURN_CASE else f"Context assembly, {case}"
            add(
                2,
                label,
                sizes,
                f"window SQL at {small}: {a['baseline_window_sql_ms']:.2f} ms",
                f"{large}/{small} {c['ratio_largest_smallest']:.2f}× (vs baseline {c['ratio_smallest_to_baseline']:.1f}×)",
                f"≤ {a['target_ratio']:g}× ({large}/{small})",
                _status(c["flat"], "NOT FLAT"),
            )
        if a.get("foreign_private_items"):
            add(
                2,
                "Masking sanity (private text in another mode's window)",
                f"{a['foreign_private_items']} items",
                "",
                "",
                "0",
                "LEAK",
            )
    if not failed(3, "CLI one-message run", "cli"):
        c = results["cli"]
        base = c["baseline"]
        for kind, label in (("cold", "cold, creates the DB"), ("warm", "warm")):
            k = c[kind]
            add(
                3,
                f"`printf 'hello\\n' \\| companion chat`, {label}: wall, median of {k['runs']}",
                f"{k['wall_median_s']:.3f} s",
                f"`python -c pass` {base['wall_median_s']:.3f} s",
                f"{k['wall_ratio']:.1f}×",
                f"< {c['wall_budget_s']:g} s",
                _status(k["wall_median_s"] < c["wall_budget_s"] and not k["failed"]),
            )
            add(
                3,
                f"… {label}: peak RSS (max of {k['runs']})",
                f"{k['rss_max_mib']:.1f} MiB",
                f"{base['rss_median_mib']:.1f} MiB",
                f"{k['rss_ratio']:.1f}×",
                f"< {c['rss_budget_mib']:g} MiB",
                _status(k["rss_max_mib"] < c["rss_budget_mib"]),
            )
        if "shim_warm" in c:
            s = c["shim_warm"]
            add(
                3,
                f"… warm, through `{c['shim']}`",
                f"{s['wall_median_s']:.3f} s, {s['rss_max_mib']:.1f} MiB",
                "",
                f"{s['wall_median_s'] / base['wall_median_s']:.1f}×",
                f"< {c['wall_budget_s']:g} s",
                "info",
            )
        i = c["imports"]
        found = ", ".join(i["forbidden_imported"]) or "none"
        add(
            3,
            "Imports of `companion chat` (no LLM URL)",
            f"{i['modules_imported']} modules; forbidden: {found}",
            "",
            "",
            "no telegram, discord, apscheduler, httpx",
            _status(i["ok"], "FAIL"),
        )
    if not failed(4, "First model request", "request"):
        r = results["request"]
        b = r["breakdown_bytes"]
        add(
            4,
            "First request body for `hello`, fresh DB",
            f"{r['bytes']} B",
            f"(messages {b['messages']} B, tools {b['tools']} B)",
            "",
            f"< {r['budget_bytes']} B",
            _status(r["ok"]),
        )
    if not failed(5, "Idle gateway RSS", "gateway"):
        g = results["gateway"]
        add(
            5,
            f"`companion run` (Telegram, fake Bot API) VmRSS after {g['idle_seconds']:g} s",
            f"{g['rss_mb']:.1f} MB ({g['rss_mib']:.1f} MiB)",
            f"idle `python` {g['baseline_idle_python_mb']:.1f} MB",
            f"{g['ratio']:.1f}×",
            f"< {g['budget_mb']:g} MB",
            _status(g["ok"]),
        )
        h = g.get("http_service")
        if h and h["adds_mb"] is not None:
            add(
                5,
                "… the HTTP service's share (the same gateway with `COMPANION_HTTP_PORT=off`)",
                f"+{h['adds_mb']:.1f} MB",
                f"off: {h['off_rss_mb']:.1f} MB",
                "",
                f"≤ +{h['budget_mb']:g} MB",
                _status(h["ok"]),
            )
    if not failed(6, "Telegram round trip", "roundtrip"):
        r = results["roundtrip"]
        add(
            6,
            f"Telegram round trip through `companion run` on SQLite (zero-latency model), median of {r['turns']}",
            f"{r['companion_median_ms']:.1f} ms",
            f"bare python-telegram-bot + httpx, two commits a turn {r['bare_median_ms']:.1f} ms",
            f"{r['ratio_median']:.2f}×",
            f"≤ {r['target_ratio']:g}×",
            _status(r["ok"]),
        )
        add(
            6,
            "… p90",
            f"{r['companion_p90_ms']:.1f} ms",
            f"{r['bare_p90_ms']:.1f} ms",
            f"{r['ratio_p90']:.2f}×",
            "",
            "info",
        )
        pg = r.get("engines", {}).get("postgres", {})
        if "ratio_median" in pg:
            add(
                6,
                "… on PostgreSQL (the bare bot committing to PostgreSQL too), median",
                f"{pg['companion_median_ms']:.1f} ms",
                f"{pg['bare_median_ms']:.1f} ms",
                f"{pg['ratio_median']:.2f}×",
                f"≤ {r['target_ratio']:g}×",
                _status(pg["ok"]),
            )
        elif "skipped" in pg:
            add(6, "… on PostgreSQL", pg["skipped"], "", "", "", "skipped")
    if not failed(7, "Many conversations at once", "load"):
        d = results["load"]
        c = d["conversations"]
        # An unreadable-mode apology is both a missing answer and an unexpected reply: counted once.
        bad = (
            d["missing"]
            + d["duplicated"]
            + d["conversations_out_of_order"]
            + d["unexpected_replies"]
            - d["mode_unreadable_replies"]
        )
        add(
            7,
            f"{c['telegram']} Telegram chats + {c['discord']} Discord DMs at once, {d['turns']} turns: "
            "each reply once, in order",
            f"{d['replies']} replies; {d['missing']} missing ({d['mode_unreadable_replies']} 'mode unreadable'), "
            f"{d['duplicated']} doubled, {d['conversations_out_of_order']} out of order",
            f"{d['rounds_turns_per_s']:.0f} turns/s",
            "",
            "0 wrong",
            _status(d["delivered_ok"], f"{bad} WRONG"),
        )
        add(
            7,
            f"… gateway VmRSS after {d['rss_last_round_turns']} turns vs after {d['rss_checkpoint_turns']}",
            f"{d['rss_last_round_mb']:.1f} MB",
            f"{d['rss_checkpoint_mb']:.1f} MB",
            f"{d['rss_growth_mb']:+.2f} MB",
            f"≤ +{d['budget_mb']:g} MB",
            _status(d["memory_ok"]),
        )
        z, idle = d.get("readyz_under_load"), d.get("readyz_idle") or {}
        if z and z["probes"]:
            add(
                7,
                f"… GET /readyz from another process every 50 ms meanwhile: {z['probes']} probes",
                f"max {z['max_ms']:.1f} ms (p99 {z['p99_ms']:.1f}, median {z['median_ms']:.1f})",
                f"idle gateway: max {idle.get('max_ms')} ms (p99 {idle.get('p99_ms')})",
                "",
                f"< {z['budget_ms']:g} ms",
                _status(z["ok"], f"{z['over_budget']} SLOW"),
            )
    if not failed(8, "Mirrors", "mirror"):
        m = results["mirror"]
        add(
            8,
            f"a normal turn with two mirror bindings (handle + reply delivery), median of {m['turns']}",
            f"{m['two_median_ms']:.2f} ms",
            f"no binding {m['none_median_ms']:.2f} ms",
            f"{m['ratio_median']:.2f}×",
            f"≤ {m['target_ratio']:g}×",
            _status(m["ok"]),
        )
        add(
            8,
            "… including sending both copies (in-process senders)",
            f"{m['two_with_sends_median_ms']:.2f} ms",
            f"{m['none_median_ms']:.2f} ms",
            f"{m['ratio_with_sends']:.2f}×",
            "",
            "info",
        )
        d = m["dispatch"]
        add(
            8,
            f"dispatcher: {d['rows']} mirror rows to the fake Discord through discord.py",
            f"{d['dispatch_rows_per_s']:.0f} rows/s",
            f"bare discord.py sends {d['bare_sends_per_s']:.0f}/s",
            f"{d['ratio_time']:.2f}× the time",
            "",
            "info",
        )
    if not failed(9, "Proactive triage", "triage"):
        t = results["triage"]
        small, large = (t["sizes"][k] for k in sorted(t["sizes"], key=int))
        add(
            9,
            f"one triage tick, {large['people']} people / {large['followups']} follow-ups"
            f" ({large['due_candidates']} due), median of {t['repeats']}",
            f"{large['median_ms']:.2f} ms",
            f"{small['people']} people / {small['followups']} follow-ups {small['median_ms']:.2f} ms",
            f"{t['ratio']:.2f}×",
            f"≤ {t['target_ratio']:g}×",
            _status(t["ok"]),
        )
        plans = ", ".join(f"{kind} {'yes' if ok else 'NO'}" for kind, ok in t["indexed"].items())
        add(
            9,
            "candidate statements start from their due index (EXPLAIN QUERY PLAN)",
            plans,
            "",
            "",
            "all",
            _status(all(t["indexed"].values())),
        )
    if not failed(10, "Web chat turn", "web"):
        w = results["web"]
        add(
            10,
            f"a web chat turn (POST /send until its answer is on the page's event stream), median of {w['turns']}",
            f"{w['web_median_ms']:.2f} ms",
            f"a terminal turn (`Companion.handle()`), same process: {w['terminal_median_ms']:.2f} ms",
            f"{w['ratio_median']:.2f}×",
            f"≤ {w['target_ratio']:g}×",
            _status(w["ok"]),
        )
        add(
            10,
            "… p95",
            f"{w['web_p95_ms']:.2f} ms",
            f"{w['terminal_p95_ms']:.2f} ms",
            f"{w['ratio_p95']:.2f}×",
            "",
            "info",
        )
    if not failed(11, "Streamed replies", "streaming"):
        st = results["streaming"]
        for platform in ("telegram", "discord"):
            streamed, whole = st[platform]["streamed"], st[platform]["whole"]
            add(
                11,
                f"{platform}: message to first visible text, shipped bursts and pacing, median (p95) of {st['turns']}",
                f"{streamed['first_text_median_s']:.2f} ({streamed['first_text_p95_s']:.2f}) s",
                "burst window + first token + 1.2 s",
                "",
                f"≤ {st['budget_first_text_s']:g} s",
                _status(streamed["first_text_p95_s"] <= st["budget_first_text_s"]),
            )
            gap = streamed["min_gap_between_edits_s"]
            add(
                11,
                f"{platform}: edits per reply (a 4.2 s answer), the least gap between two",
                f"{max(streamed['edits_per_reply'])}, {gap if gap is not None else '-'} s",
                "",
                "",
                f"≤ {st['most_edits_per_reply']}, ≥ 0.8 s",
                "info",
            )
            add(
                11,
                f"{platform}: gateway CPU time of a streamed reply (mean)",
                f"{streamed['cpu_per_reply_ms']:.0f} ms",
                f"the same reply sent whole: {whole['cpu_per_reply_ms']:.0f} ms",
                f"{st['cpu_ratio'][platform]:.2f}×",
                f"≤ {st['cpu_ratio_budget']:g}×",
                _status(st["cpu_ratio"][platform] <= st["cpu_ratio_budget"]),
            )
    return rows


def details(results: dict) -> list[str]:
    lines: list[str] = []
    profile = results.get("turn", {}).get("profile")
    if profile:
        methods = ", ".join(
            f"{name} {m['calls']:g}× {m['ms']:.2f} ms" for name, m in profile["store_calls_per_turn"].items()
        )
        telegram = results["turn"].get("telegram_turn", {})
        lines += [
            f"Turn: {profile['trips']:g} trips to SQLite's threads, {profile['statements']:g} statements,"
            f" {profile['commits']:g} commits ({profile['fsynced_commits']:g} fsynced) a turn, against the"
            f" baseline's {results['turn']['baseline_statements_per_turn']} statements; store time a turn by"
            f" method: {methods}.",
            "",
        ]
        if telegram:
            lines += [
                f"A Telegram-shaped turn (the core's entry, the outbox, a fake sender; the update ledger is"
                f" written off the turns): {telegram['trips']:g} trips, {telegram['statements']:g} statements,"
                f" {telegram['commits']:g} commits ({telegram['fsynced_commits']:g} fsynced).",
                "",
            ]
        on_postgres = results["turn"].get("telegram_turn_postgres", {})
        if "trips" in on_postgres:
            lines += [
                f"The same on PostgreSQL: {on_postgres['trips']:g} trips, {on_postgres['statements']:g} statements,"
                f" {on_postgres['commits']:g} commits ({on_postgres['fsynced_commits']:g} synchronous).",
                "",
            ]
    cli = results.get("cli", {})
    if "imports" in cli:
        top = ", ".join(f"{m['module']} {m['ms']:.0f} ms" for m in cli["imports"]["top10_cumulative_ms"])
        lines.append(f"Top 10 imports of `companion chat` by cumulative time: {top}.")
    assembly_result = results.get("assembly", {})
    for case, c in assembly_result.get("cases", {}).items():
        for s in c["statements_growing"]:
            steps = ", ".join(f"{_size_label(n)}: {v}" for n, v in s["vm_steps_by_size"].items())
            times = ", ".join(f"{_size_label(n)}: {v:.3f} ms" for n, v in s["median_ms_by_size"].items())
            lines += [
                "",
                f"Not flat ({case}): statement {s['index']} grows with history; SQLite VM steps {steps}; time {times}.",
                f"    {s['sql']}",
                *(f"    QUERY PLAN: {p}" for p in s["plan"]),
            ]
    gateway = results.get("gateway", {})
    chain = gateway.get("imports", {}).get("rss_chain")
    if chain:
        steps = ", ".join(
            f"{c['adds']} {c['peak_rss_mib']:.1f} MiB"
            if c["marginal_mib"] is None
            else f"{c['adds']} {c['marginal_mib']:+.1f}"
            for c in chain
        )
        lines += [
            "",
            f"Gateway memory by import (peak RSS importing them in order, MiB): {steps}; "
            f"= {chain[-1]['peak_rss_mib']:.1f} MiB before any work; running: {gateway['rss_mib']:.1f} MiB.",
        ]
        found = gateway["imports"].get("forbidden_imported")
        if found:
            lines.append(f"Gateway imports a platform that is not configured: {', '.join(found)}.")
    trip = results.get("roundtrip", {})
    if "bot_api_calls_per_turn" in trip:

        def calls(name: str) -> str:
            return ", ".join(f"{v:g} {k}" for k, v in trip["bot_api_calls_per_turn"][name].items())

        sizes = trip["model_request_bytes"]
        lines += [
            "",
            (
                f"Round trip: Bot API calls a turn: companion {calls('companion run')}; "
                f"bare {calls('bare bot')}; model request {sizes.get('companion run', 0)} B against "
                f"{sizes.get('bare bot', 0)} B."
            ),
        ]
        strays = {k: v for k, v in trip["stray_replies"].items() if v}
        if strays:
            lines.append(f"Round trip: replies that answered no message of the run: {strays}.")
        traced = trip.get("syscalls", {}).get("companion run")
        if traced:
            bare = trip["syscalls"].get("bare bot") or {}
            lines.append(
                f"Round trip under strace ({traced['turns']} more turns each): fsync a turn "
                f"{traced['fsync_per_turn']:g} (bare {bare.get('fsync_per_turn', '?')}); syscalls a "
                f"turn {traced['syscalls_per_turn']:g} (bare {bare.get('syscalls_per_turn', '?')})."
            )
    many = results.get("load", {})
    if "per_round" in many:
        series = " ".join(f"{r['rss_mb']:.1f}" for r in many["per_round"])
        t = many["turn_ms_in_core"]
        lines += [
            "",
            (
                f"Load: VmRSS (MB) after each round of {many['per_round'][0]['turns']} "
                f"turns: {series}; after the queued phase {many['rss_after_queued_mb']:.1f}. "
                f"Turn time in the core (queueing included): median {t['median']:.0f} ms, "
                f"p90 {t['p90']:.0f} ms, max {t['max']:.0f} ms. Telegram: "
                f"{many['telegram_getupdates_per_turn']:g} getUpdates and "
                f"{many['telegram_updates_parsed_per_turn']:g} updates parsed a turn."
            ),
        ]
        if many["missing_by_message_number"]:
            lines.append(
                f"Load: missing replies by message number: {many['missing_by_message_number']}; "
                f"examples: {many['examples']}."
            )
        for line in many.get("log_warnings", [])[:3]:
            lines.append(f"    {line}")
    if gateway.get("note"):
        lines += ["", f"Gateway: {gateway['note']}"]
    if gateway.get("stderr_tail"):
        lines += ["    " + line for line in gateway["stderr_tail"].splitlines()[-8:]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(MEASUREMENTS)}")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()] or list(MEASUREMENTS)
    unknown = [name for name in chosen if name not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement {unknown[0]!r}; choose from {', '.join(MEASUREMENTS)}")

    env = environment()
    print(
        f"python {env['python']} ({env['implementation']}), SQLite {env['sqlite']}, aiosqlite {env['aiosqlite']}, "
        f"{env['cpu_count']} CPUs ({env['usable_cpus']} usable), {env['platform']}"
        + (" — quick mode" if args.quick else ""),
        flush=True,
    )
    results: dict = {}
    timings: dict[str, float] = {}
    errors = 0
    started = time.perf_counter()
    for name in chosen:
        t0 = time.perf_counter()
        print(f"  {name} ...", end="", flush=True, file=sys.stderr)
        try:
            results[name] = MEASUREMENTS[name](quick=args.quick)
        except Exception:
            errors += 1
            results[name] = {"error": traceback.format_exc(), "ok": False}
        timings[name] = round(time.perf_counter() - t0, 1)
        print(f" {timings[name]:.1f} s", file=sys.stderr, flush=True)
    total = round(time.perf_counter() - started, 1)

    print()
    print("\n".join(table(results)))
    extra = details(results)
    if extra:
        print()
        print("\n".join(extra))
    for name, result in results.items():
        if "error" in result:
            print(f"\n{name} failed:\n{result['error']}", file=sys.stderr)

    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "environment": env,
        "seconds": {"total": total, **timings},
        "results": results,
    }
    args.json.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\n{total:.0f} s in all; JSON written to {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
