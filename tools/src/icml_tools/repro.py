"""``icml-repro``: run the registered reproductions and report what they measured.

Reproductions are found through the entry-point group ``icml.reproductions``, which the packages'
unpublished experiments members register (protocol in :mod:`icml_tools.protocol`). The runner owns the
protocol: it checks budget and seed, times each call, checks each result and writes every report; a
reproduction only measures and decides. Each selected one runs in turn, in its own process
(:mod:`icml_tools.child`), so thread counts, RNG state, the default dtype, environment variables and caches
set by one never reach the next; ``--timeout SECONDS`` stops one that runs longer (with the processes it
started), and a crash or a timeout is reported as that reproduction's error while the others go on. Ctrl-C
leaves a readable report and prints the command that continues it; ``--resume REPORT_DIR`` runs what the
report lacks, with its ``--only`` and ``--timeout`` unless given again. Each result records the torch thread
counts, torch and numpy versions and device it ran with. The runner prints a table (system, claim, metric,
ours, baseline, verdict) and writes ``<out>/<timestamp>/report.md``, ``results.json`` and one PNG per
figure. Exit code 0 when every selected reproduction ran, whatever its verdict; 1 when one raised, crashed,
timed out or returned something that does not follow the protocol; 2 for a bad command line.
"""

from __future__ import annotations

import json
import platform
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from icml_tools import ray_backend
from icml_tools.child import Child, preload
from icml_tools.plots import draw_figure
from icml_tools.protocol import ProtocolError, check_run_args, format_number, validate_result
from icml_tools.runner import (
    distribution,
    new_report_folder,
    parse_run_args,
    registered_entry,
    run_meta,
    select,
    write_text_atomic,
)

GROUP = "icml.reproductions"
__all__ = ["GROUP", "Outcome", "ProtocolError", "discover", "main", "run_one", "run_reproduction"]


@dataclass
class Outcome:
    name: str  # entry-point name
    target: str  # "module:function"
    distribution: str
    seconds: float
    result: dict | None = None
    error: str | None = None
    env: dict = field(default_factory=dict)  # what it ran with: threads, torch/numpy versions, device
    timed_out: bool = False
    seed: int = 0

    @property
    def verdict(self) -> str:
        if self.result is None:
            return "TIMEOUT" if self.timed_out else "ERROR"
        return "PASS" if self.result["passed"] else "FAIL"

    @property
    def undocumented_threads(self) -> bool:
        """It ran on a torch thread count other than the one its process started with, and its result has no
        ``threads`` key saying why."""
        used = self.env.get("threads", [])
        default = self.env.get("default_threads")
        return any(t != default for t in used) and not (self.result or {}).get("threads")


def discover(group: str = GROUP) -> dict[str, EntryPoint]:
    """Registered entry points of ``group`` by name (a name registered twice is an error)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        if ep.name in found and found[ep.name].value != ep.value:
            raise RuntimeError(
                f"{group} entry point {ep.name!r} is registered twice: {found[ep.name].value} and {ep.value}"
            )
        found[ep.name] = ep
    return dict(sorted(found.items()))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def run_one(ep, budget: str, seed: int, timeout: float | None = None, fork: bool | None = None) -> Outcome:
    """Run one registered reproduction under the protocol in a process of its own (:class:`Child`; ``fork``:
    forked or a new interpreter, by default as :class:`Child` chooses), stopped after ``timeout`` seconds
    when given (with every process it started: its process group is killed); what it raises, a crash of its
    process or the timeout becomes the outcome's error. Ctrl-C is passed on to it (and what it started): it is
    given a few seconds to end, then killed, and the ``KeyboardInterrupt`` is raised here."""
    check_run_args(budget, seed)
    with tempfile.TemporaryDirectory(prefix="icml-repro-") as tmp:
        out = Path(tmp) / "outcome.json"
        start = time.perf_counter()
        child = Child(ep.value, budget, seed, out, fork=fork)
        try:
            code = child.wait(timeout)
        except KeyboardInterrupt:
            child.interrupt()  # it runs in a process group of its own, which the terminal's Ctrl-C misses
            if child.wait(5.0) is None:
                child.kill()
            raise
        if code is None:
            child.kill()
            seconds = time.perf_counter() - start
            error = f"stopped after {seconds:.1f} s: it exceeded the time limit (--timeout {timeout:g} s)"
            return Outcome(
                ep.name, ep.value, distribution(ep), seconds, error=error, timed_out=True, seed=seed
            )
        if not out.is_file():
            how = f"signal {_signal_name(-code)}" if code < 0 else f"exit code {code}"
            error = f"its process ended ({how}) without writing a result"
            seconds = time.perf_counter() - start
            return Outcome(ep.name, ep.value, distribution(ep), seconds, error=error, seed=seed)
        data = json.loads(out.read_text())
    return Outcome(
        ep.name,
        ep.value,
        distribution(ep),
        data["seconds"],
        data["result"],
        data["error"],
        data["env"],
        seed=seed,
    )


def run_reproduction(name: str, budget: str = "quick", seed: int = 0) -> dict:
    """The checked result of the reproduction registered as ``name``, run as ``icml-repro --only name`` runs
    it (what tests call); raises what the reproduction raises, or :class:`ProtocolError` for a bad result."""
    ep = registered_entry(discover(), name, "reproduction")
    check_run_args(budget, seed)
    return validate_result(ep.load()(budget=budget, seed=seed))


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def sweeps(outcomes: list[Outcome]) -> bool:
    """Whether the outcomes ran with more than one seed (the tables then have a seed column)."""
    return len({o.seed for o in outcomes}) > 1


def summary_rows(outcomes: list[Outcome]) -> list[list[str]]:
    """One row per outcome, under :func:`header` (with a seed column for a seed sweep)."""
    rows = []
    sweep = sweeps(outcomes)
    for o in outcomes:
        r = o.result or {}
        rows.append(
            [
                r.get("system", o.name),
                *([str(o.seed)] if sweep else []),
                r.get("claim", "(raised, see report)"),
                r.get("metric", ""),
                format_number(r["ours"]) if r else "",
                format_number(r["baseline"]) if r else "",
                o.verdict,
                f"{o.seconds:.1f}",
                r.get("cache", ""),
            ]
        )
    return rows


HEADER = ["system", "claim", "metric", "ours", "baseline", "verdict", "time (s)", "cache"]


def header(outcomes: list[Outcome]) -> list[str]:
    """The summary table's columns: :data:`HEADER`, with ``seed`` after ``system`` for a seed sweep."""
    return [HEADER[0], "seed", *HEADER[1:]] if sweeps(outcomes) else HEADER


def text_table(rows: list[list[str]], claim_width: int = 60, columns: list[str] = HEADER) -> str:
    claim = columns.index("claim")
    rows = [
        [_shorten(c, claim_width) if i == claim else _shorten(c, 40) for i, c in enumerate(r)] for r in rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(columns)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [format_number(c) if isinstance(c, float) else _md_escape(c) for c in r]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _env_line(o: Outcome) -> str:
    """What the reproduction ran with, for its report section."""
    env = o.env
    parts = [f"Python {env.get('python', '?')}", f"numpy {env.get('numpy', '-')}"]
    if "torch" in env:
        parts.append(f"torch {env['torch']} on {env.get('device', '?')}")
        threads = ", ".join(str(t) for t in env.get("threads", []))
        line = f"torch threads used: {threads} (its process started with {env.get('default_threads')})"
        why = (o.result or {}).get("threads")
        if why:
            line += f"; why: {why}"
        elif o.undocumented_threads:
            line += "; **not documented** (no `threads` key in the result)"
        parts.append(line)
    return "Ran with " + ", ".join(parts) + "."


def seeds_text(seeds: list) -> str:
    """``seed 3`` or ``seeds 0, 1, 2``."""
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def write_report(outcomes: list[Outcome], folder: Path, meta: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    seed_text = seeds_text(meta.get("seeds", [meta["seed"]]))
    backend = f", backend {meta['backend']}" if meta.get("backend", "serial") != "serial" else ""
    sections = [
        "# icml reproductions",
        "",
        f"Budget `{meta['budget']}`, {seed_text}{backend}, {meta['started']}, {meta['platform']}.",
        "",
        markdown_table(header(outcomes), summary_rows(outcomes)),
        "",
    ]
    sweep = sweeps(outcomes)
    for o in outcomes:
        title = o.result.get("system", o.name) if o.result else o.name
        sections += [
            f"## {title}, seed {o.seed}" if sweep else f"## {title}",
            "",
            f"Entry point `{o.name}` = `{o.target}` ({o.distribution}), seed {o.seed}, {o.seconds:.1f} s.",
            "",
        ]
        if o.env:
            sections += [_env_line(o), ""]
        r = o.result
        if r is None:
            sections += ["Raised:", "", "```", (o.error or "").rstrip(), "```", ""]
            continue
        sections += [
            f"**Claim.** {r['claim']}",
            "",
            f"**Metric.** {r['metric']}",
            "",
            f"**Criterion.** {r['criterion']}",
            "",
            f"**Measured.** ours {format_number(r['ours'])}, baseline {format_number(r['baseline'])}: "
            f"**{o.verdict}**",
            "",
        ]
        if r.get("notes"):
            sections += [r["notes"], ""]
        if r.get("rows"):
            keys = list(dict.fromkeys(k for row in r["rows"] for k in row))
            sections += [markdown_table(keys, [[row.get(k, "") for k in keys] for row in r["rows"]]), ""]
        for fig in r.get("figures", []):
            png = (
                f"{o.name}__{fig['name']}.png" if not sweep else f"{o.name}__seed{o.seed}__{fig['name']}.png"
            )
            try:
                if not (folder / png).is_file():  # drawn once, when its reproduction finished
                    draw_figure(fig, folder / png)
                sections += [f"![{fig['title']}]({png})", ""]
            except Exception as exc:  # a figure that cannot be drawn is reported, not fatal
                sections += [f"(figure {fig['name']!r} could not be drawn: {exc})", ""]
    write_text_atomic(folder / "report.md", "\n".join(sections))
    payload = {
        "meta": meta,
        "results": [
            {
                "name": o.name,
                "seed": o.seed,
                "target": o.target,
                "distribution": o.distribution,
                "seconds": o.seconds,
                "verdict": o.verdict,
                "result": o.result,
                "error": o.error,
                "timed_out": o.timed_out,
                "env": o.env,
            }
            for o in outcomes
        ],
    }
    write_text_atomic(folder / "results.json", json.dumps(payload, indent=2, allow_nan=True))


def read_report(folder: Path) -> tuple[dict, list[Outcome]]:
    """The meta and outcomes of the report in ``folder`` (its ``results.json``)."""
    payload = json.loads((folder / "results.json").read_text())
    outcomes = [
        Outcome(
            r["name"],
            r["target"],
            r["distribution"],
            r["seconds"],
            r["result"],
            r["error"],
            r.get("env", {}),
            r.get("timed_out", False),
            r.get("seed", payload["meta"].get("seed", 0)),
        )
        for r in payload["results"]
    ]
    return payload["meta"], outcomes


def earlier_seconds(out: Path, budget: str, exclude: Path | None = None) -> dict[str, float]:
    """Each reproduction's seconds in the newest report under ``out`` (other than ``exclude``) that ran it on
    ``budget`` without error: what the time left is computed from; empty when there is none."""
    seconds: dict[str, float] = {}
    for results in sorted(out.glob("*/results.json"), reverse=True):
        if exclude is not None and results.parent.resolve() == exclude.resolve():
            continue
        try:
            meta, outcomes = read_report(results.parent)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if meta.get("budget") == budget:
            for o in outcomes:
                if o.error is None:
                    seconds.setdefault(o.name, o.seconds)
    return seconds


def result_line(o: Outcome, sweep: bool = False) -> str:
    """One finished reproduction, as printed the moment it finishes (``sweep``: naming its seed)."""
    r = o.result
    name = f"{o.name} seed {o.seed}" if sweep else o.name
    if r is None:
        return f"{o.verdict:7s} {name} ({o.seconds:.1f} s): {(o.error or '').strip().splitlines()[-1]}"
    cache = f", cache {r['cache']}" if r.get("cache") else ""
    return (
        f"{o.verdict:7s} {name}: ours {format_number(r['ours'])}, baseline {format_number(r['baseline'])} "
        f"({o.seconds:.1f} s{cache})"
    )


def _eta(names: list[str], expected: dict[str, float]) -> str:
    if not names or any(n not in expected for n in names):
        return ""
    return f", about {sum(expected[n] for n in names) / 60:.0f} min left by the last report"


def resume_command(folder: Path, args) -> str:
    """The command that continues this run in ``folder``: its budget, seeds, ``--only`` and ``--timeout``
    (which ``--resume`` would take from the report anyway) and backend, for the Ctrl-C line."""
    parts = ["uv", "run", "icml-repro", "--resume", str(folder), f"--{args.budget}"]
    parts += (
        ["--seeds", ",".join(map(str, args.seeds))] if len(args.seeds) > 1 else ["--seed", str(args.seed)]
    )
    if args.only:
        parts += ["--only", ",".join(args.only)]
    if args.timeout is not None:
        parts += ["--timeout", str(args.timeout)]
    if args.backend != "serial":
        parts += ["--backend", args.backend]
        if args.ray_address is not None:
            parts += ["--ray-address", args.ray_address]
        if args.cpus_per_task is not None:
            parts += ["--cpus-per-task", str(args.cpus_per_task)]
    return shlex.join(parts)


def _resumed(args) -> tuple[dict, list[Outcome]] | int:
    """The meta and outcomes of the report ``--resume`` names, with ``args.only`` and ``args.timeout`` taken
    from it unless given on the command line (then they replace the report's, which the report records); the
    exit code 2 when it cannot be read or ran another budget or other seeds."""
    try:
        meta, outcomes = read_report(args.resume)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"icml-repro: --resume {args.resume}: no readable results.json there ({exc})", file=sys.stderr)
        return 2
    ran = meta.get("seeds", [meta.get("seed")])
    if (meta.get("budget"), ran) != (args.budget, args.seeds):
        print(
            f"icml-repro: --resume {args.resume} ran budget {meta.get('budget')!r} {seeds_text(ran)}; "
            f"pass the same (got {args.budget!r} {seeds_text(args.seeds)})",
            file=sys.stderr,
        )
        return 2
    stored_only = list(meta.get("only", []))  # a report from before it was stored: every reproduction
    if args.only and args.only != stored_only:
        was = ",".join(stored_only) or "(none: every reproduction)"
        print(
            f"icml-repro: --only {','.join(args.only)} replaces the resumed run's --only {was}",
            file=sys.stderr,
        )
    if args.timeout is not None and args.timeout != meta.get("timeout"):
        was = meta.get("timeout") or "(none)"
        print(
            f"icml-repro: --timeout {args.timeout} replaces the resumed run's --timeout {was}",
            file=sys.stderr,
        )
    if args.only:
        meta["only"] = args.only
    else:
        args.only = stored_only
    if args.timeout is not None:
        meta["timeout"] = args.timeout
    else:
        args.timeout = meta.get("timeout")
    return meta, outcomes


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the report folder existed, or after its last write
        print("\nicml-repro: stopped by Ctrl-C", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = parse_run_args("icml-repro", __doc__, "reports", argv, repro=True)
    outcomes: list[Outcome] = []
    if args.resume is not None and not args.list:
        resumed = _resumed(args)  # before the selection: the report's --only selects
        if isinstance(resumed, int):
            return resumed
        meta, outcomes = resumed
    registered = discover()
    names = select(registered, args, "icml-repro")
    if isinstance(names, int):
        if names == 2 and args.resume is not None:
            print(f"icml-repro: (the --only of the run in {args.resume})", file=sys.stderr)
        return names
    if not names:
        print("icml-repro: no reproductions are registered (is the workspace synced?)", file=sys.stderr)
        return 1
    if args.backend == "ray":
        try:  # before any work: Ray installed, the cluster's address reachable
            ray_backend.import_ray()
            ray_backend.check_address(args.ray_address)
        except ray_backend.RayBackendError as exc:
            print(f"icml-repro: {exc}", file=sys.stderr)
            return 2
    now = datetime.now(timezone.utc)
    if args.resume is not None:
        folder = args.resume
    else:
        meta = run_meta(args, now)
        meta["platform"] = f"{platform.system()} {platform.machine()}, Python {meta['python']}"
        meta["only"] = args.only
        meta["timeout"] = args.timeout
        folder = new_report_folder(args.out, now)
    # the report's rows: those a resumed report holds first, in their order, then the selected ones
    rows = list(dict.fromkeys([*(o.name for o in outcomes), *names]))
    order = {(n, seed): k for k, (n, seed) in enumerate((n, s) for n in rows for s in args.seeds)}
    done = {(o.name, o.seed) for o in outcomes}
    selected = set(names)
    todo = [key for key in order if key not in done and key[0] in selected]
    sweep = len(args.seeds) > 1

    def finished(outcome: Outcome) -> None:
        outcomes.append(outcome)
        outcomes.sort(key=lambda o: order.get((o.name, o.seed), len(order)))
        write_report(outcomes, folder, meta)
        print(result_line(outcome, sweep), flush=True)

    count = 0
    try:  # from the folder's making on: Ctrl-C at any moment leaves a readable report that --resume continues
        if args.resume is None:
            folder.mkdir(parents=True)
        if done:
            print(
                f"icml-repro: {folder} holds {len(done)} finished; running the {len(todo)} missing",
                file=sys.stderr,
            )
        expected = earlier_seconds(
            args.out if args.resume is None else args.resume.parent, args.budget, folder
        )
        preload()
        if args.backend == "ray":
            tasks = [
                ray_backend.Task(k, n, registered[n].value, distribution(registered[n]), seed)
                for k, (n, seed) in enumerate(todo)
            ]
            cpus = args.cpus_per_task or ray_backend.default_cpus()
            where = args.ray_address or "a local Ray"
            print(
                f"icml-repro: {len(tasks)} Ray tasks on {where}, {cpus} CPUs each",
                file=sys.stderr,
                flush=True,
            )
            for _, outcome in ray_backend.run_tasks(
                tasks, args.budget, args.timeout, address=args.ray_address, cpus=cpus, make_outcome=Outcome
            ):
                finished(outcome)
                count += 1
        else:
            for k, (name, seed) in enumerate(todo):
                label = f"{name} seed {seed}" if sweep else name
                eta = _eta([n for n, _ in todo[k:]], expected)
                print(f"[{k + 1}/{len(todo)}] {label}{eta}", file=sys.stderr, flush=True)
                finished(run_one(registered[name], args.budget, seed, args.timeout))
                count += 1
        write_report(outcomes, folder, meta)
    except ray_backend.RayBackendError as exc:
        print(f"icml-repro: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C ends the runner at once
        try:
            write_report(outcomes, folder, meta)
            print(
                f"\nicml-repro: stopped by Ctrl-C; {count} of {len(todo)} finished this run, "
                f"{len(outcomes)} in the report {folder / 'report.md'}"
                + (f"; continue with: {resume_command(folder, args)}" if count < len(todo) else ""),
                file=sys.stderr,
            )
        finally:
            signal.signal(signal.SIGINT, previous)  # main called in a process that goes on (tests)
        return 130
    print()
    print(text_table(summary_rows(outcomes), columns=header(outcomes)))
    print(
        f"\n{len(outcomes)} {'runs (reproduction, seed)' if sweep else 'reproductions'} in "
        f"{sum(o.seconds for o in outcomes):.0f} s; report: {folder / 'report.md'}"
    )
    for o in outcomes:
        if o.undocumented_threads:
            print(
                f"icml-repro: {o.name} ran on torch threads {o.env['threads']} (its process started with "
                f"{o.env['default_threads']}) and its result has no 'threads' key saying why",
                file=sys.stderr,
            )
    errors = [o for o in outcomes if o.error is not None]
    for o in errors:
        print(f"\n{o.name}{f' (seed {o.seed})' if sweep else ''} raised:\n{o.error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
