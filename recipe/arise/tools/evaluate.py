"""Evaluate a checkpoint the paper's way (App. A.3) on verl's own validation machinery.

``python -m recipe.arise.tools.evaluate --model BASE --checkpoint CKPT/global_step_N --data F1 F2 ... \
    --k 32 --decoding sampled --out DIR [-- hydra overrides]``

It runs ``recipe.arise.adapters.main_arise`` with ``trainer.val_only=True`` (no second inference stack):
the actor weights and the skill library saved with that checkpoint are restored, the ARISE
pipeline is active (selection with epsilon = ``arise.selection.val_epsilon`` = 0, the gate), and
every problem is answered ``k`` times. The gate's sigma is frozen at the one saved with that
checkpoint (``arise/gate.json``, or beside ``--library``; validation never recalibrates it), so
``arise.selection.temperature=auto`` evaluates with the sigma training ended on; a number given as
``-- arise.selection.temperature=X`` overrides it. Pass@1 averaged over the k runs is verl's
``val-core/<data_source>/acc/mean@k``; for an environment's games (data source ``env/<env>/<task
type>``) that is the success rate, tabled per task type (``recipe.arise.tools.evaluate_env``).
``--no-skills`` evaluates the same weights without the library (baselines); ``--library
final|seeds|none|FILE`` picks the library: the checkpoint's (default with ``--checkpoint``), the
seed skills, none, or a ``library.parquet`` / exported ``skills.jsonl`` with the checkpoint's weights.
Outputs: ``eval.md`` (Table-1 layout: the evaluated benchmarks; the paper's seven columns when all
were evaluated; per environment, success per task type), ``eval.csv``, ``eval.json``; ``eval.log``
holds the validation run's whole output (Ray, vLLM, verl; an earlier one in the same ``--out`` is kept as
``eval.launchN.log``) while the console shows what starts, progress and the table (``--verbose``:
everything). The run starts as training's do (``recipe.arise.tools.launch``: Ray's start-up retried once,
nothing of the run left on the machine).

Before the run starts, ``recipe.arise.tools.preflight`` composes and checks the final config (no GPU is
touched); ``--print-overrides`` prints the run's entry and overrides instead of running (the
scripts' ``PRINT_OVERRIDES=1``). Everything the run writes stays under ``--out``, whatever the cwd.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

from recipe.arise.tools import evaluate_env

# (data_source, column title) in the order of the paper's Table 1
IN_DISTRIBUTION = [("amc23", "AMC 23"), ("aime24", "AIME 24"), ("aime25", "AIME 25")]
OMNI_DOMAINS = [
    ("omni_math_algebra", "Algebra"),
    ("omni_math_number_theory", "Number Theory"),
    ("omni_math_combinatorics", "Combinatorics"),
    ("omni_math_geometry", "Geometry"),
]


def collect_results(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per data source: Pass@1 (mean acc over k samples), k, skill-use rate and mean reward; for
    environment episodes also the mean turns, invalid actions and failed episodes. A data source may
    hold slashes (``env/<env>/<task type>``): the key is ``val-core/<source>/<var>/mean@k``."""
    results: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) < 4 or parts[0] not in ("val-core", "val-aux") or not parts[-1].startswith("mean@"):
            continue
        source, var, stat = "/".join(parts[1:-2]), parts[-2], parts[-1]
        k = int(stat.split("@")[1])
        entry = results.setdefault(source, {})
        if k < entry.get(f"_{var}_k", 0):
            continue  # keep the largest k (mean@k over all samples)
        entry[f"_{var}_k"] = k
        name = {
            "acc": "pass@1",
            "skill_used": "skill_use",
            "score": "reward",
            "skill_scored": "scored",
            "max_p": "max_p",
            "env_turns": "turns",
            "env_invalid": "invalid",
            "env_failed": "failed",
        }.get(var)
        if name:
            entry[name] = float(value)
            entry["k"] = k
    return {s: {k: v for k, v in e.items() if not k.startswith("_")} for s, e in results.items() if "pass@1" in e}


PAPER_SOURCES = [s for s, _ in IN_DISTRIBUTION + OMNI_DOMAINS]


def paper_layout(sources) -> bool:
    """The paper's whole Table-1 column set only when all seven of its benchmarks were evaluated."""
    return set(PAPER_SOURCES) <= set(sources)


def table_rows(results: dict[str, dict[str, float]]) -> tuple[list[str], list[str]]:
    """Column titles and formatted cells (percent): the evaluated benchmarks, the paper's in Table 1's
    order and with its titles (all seven, and the Omni macro average, when all were evaluated), then
    any other sources."""
    titles, cells = [], []

    def cell(source):
        return f"{100 * results[source]['pass@1']:.1f}" if source in results else "—"

    full = paper_layout(results)
    for source, title in IN_DISTRIBUTION + OMNI_DOMAINS:
        if full or source in results:
            titles.append(title if source in dict(IN_DISTRIBUTION) else f"Omni {title}")
            cells.append(cell(source))
    domains = [results[s]["pass@1"] for s, _ in OMNI_DOMAINS if s in results]
    if len(domains) == len(OMNI_DOMAINS):
        titles.append("Omni Avg.")
        cells.append(f"{100 * sum(domains) / len(domains):.1f}")
    for source in sorted(set(results) - set(PAPER_SOURCES)):
        titles.append(source)
        cells.append(cell(source))
    return titles, cells


def markdown_table(runs: list[tuple[str, dict[str, dict[str, float]]]]) -> list[str]:
    """One row per (method label, results); the columns are the benchmarks any run evaluated (the
    paper's Table 1 when all of them were); environments' games get a table of their own each
    (success per task type)."""
    env = evaluate_env.env_tables(runs)
    runs = [(label, {s: r for s, r in res.items() if not evaluate_env.is_env_source(s)}) for label, res in runs]
    if env and not any(res for _, res in runs):
        return env
    return _pass_at_1_table(runs) + ([""] + env if env else [])


def _pass_at_1_table(runs: list[tuple[str, dict[str, dict[str, float]]]]) -> list[str]:
    rows = [(label, dict(zip(*table_rows(results), strict=False))) for label, results in runs]
    sources = {s for _, results in runs for s in results}
    titles = table_rows({s: {"pass@1": 0.0} for s in sources})[0]
    k = max((r["k"] for _, results in runs for r in results.values()), default=0)
    lines = [f"Pass@1 (%) averaged over k={k} samples per problem"]
    if not paper_layout(sources):
        missing = ", ".join(s for s in PAPER_SOURCES if s not in sources)
        lines.append(f"(the evaluated benchmarks only; the paper's Table 1 also has {missing})")
    lines += [
        "",
        "| Method | " + " | ".join(titles) + " |",
        "|---|" + "---|" * len(titles),
    ]
    lines += [f"| {label} | " + " | ".join(cells.get(t, "—") for t in titles) + " |" for label, cells in rows]
    return lines


def combine(dirs: list[str], out_dir: str | os.PathLike) -> str:
    """Merge several evaluation outputs (their eval.json) into one Table-1 style ``table.md``. A run
    whose label another run has too is named ``label (folder)`` (its folder as given, if those agree
    too), so that no two rows look alike."""
    runs = []
    for d in dirs:
        path = Path(d) / "eval.json"
        if not Path(d).is_dir():
            raise FileNotFoundError(f"{d}: no such folder (an evaluation output: OUT of eval_arise.sh)")
        if not path.exists():
            raise FileNotFoundError(f"{path}: not an evaluation output folder (no eval.json)")
        try:
            data = json.loads(path.read_text())
            runs.append([data["method"], data["results"]])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not an evaluation result ({type(error).__name__}: {error})") from error
    labels = [label for label, _ in runs]
    for i, d in enumerate(dirs):
        if labels.count(labels[i]) > 1:
            names = [Path(x).resolve().name for x, lab in zip(dirs, labels, strict=True) if lab == labels[i]]
            runs[i][0] = f"{labels[i]} ({Path(d).resolve().name if names.count(Path(d).resolve().name) == 1 else d})"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(markdown_table([tuple(r) for r in runs])) + "\n")
    return str(out / "table.md")


def write_outputs(results: dict[str, dict[str, float]], out_dir: str | os.PathLike, label: str) -> dict[str, str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = markdown_table([(label, results)]) + [
        "",
        "Skill use per benchmark: skill use = fraction of trajectories with an injected skill; scored ="
        " fraction whose query had the cache scored; max p = mean top softmax probability, which the"
        " gate compares with delta (skill use 0 with scored 1 means the gate rejected every query).",
        "",
        "| benchmark | pass@1 | skill use | scored | max p | mean reward | k |",
        "|---|---|---|---|---|---|---|",
    ]

    def fmt(r, key):
        return f"{r[key]:.3f}" if key in r else "—"

    for source in sorted(results):
        r = results[source]
        cells = [fmt(r, key) for key in ("skill_use", "scored", "max_p", "reward")]
        lines.append(f"| {source} | {100 * r['pass@1']:.1f} | " + " | ".join(cells) + f" | {r['k']} |")
    lines += evaluate_env.detail_lines(results)
    paths = {"markdown": str(out / "eval.md"), "csv": str(out / "eval.csv"), "json": str(out / "eval.json")}
    Path(paths["markdown"]).write_text("\n".join(lines) + "\n")
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.writer(f)
        columns = ["skill_use", "scored", "max_p", "reward"]
        writer.writerow(["method", "data_source", "pass@1", *columns, "k"])
        for source in sorted(results):
            r = results[source]
            writer.writerow([label, source, r["pass@1"], *(r.get(c, "") for c in columns), r["k"]])
    Path(paths["json"]).write_text(json.dumps({"method": label, "results": results}, indent=2))
    return paths


def read_validation_metrics(path: str | os.PathLike) -> dict[str, float]:
    """The last record of verl's file logger that holds validation metrics."""
    found = None
    for line in Path(path).read_text().splitlines():
        if line.strip():
            data = json.loads(line)["data"]
            if any(key.startswith("val-core/") for key in data):
                found = data
    if found is None:
        raise ValueError(f"{path}: no validation metrics (val-core/*) were logged")
    return found


ENTRY = "recipe.arise.adapters.main_arise"


def run_validation(cmd: list[str], env: dict, log_path: Path, verbose: bool = False) -> int:
    """The validation run through training's start-up path (recipe.arise.tools.launch: Ray's start-up
    retried once, the run's files removed at exit), its whole output in ``log_path`` and a concise
    console (``verbose``: every line)."""
    from recipe.arise.tools.launch import launch

    return launch(cmd, log_path, "[eval]", verbose=verbose, env=env)


def _hydra_str(value: str | os.PathLike) -> str:
    """A value quoted for a hydra override (paths may hold characters hydra would parse)."""
    text = str(value).replace("'", "\\'")
    return f"'{text}'"


def _local_or_id(path: str) -> str:
    """A local path made absolute (the run's Ray workers have another cwd); a hub id as given."""
    return str(Path(path).resolve()) if Path(path).exists() else path


def build_overrides(args, check_files: bool = True) -> list[str]:
    """The validation run's hydra overrides, in three layers (later ones win):

    1. defaults a bare ``python -m recipe.arise.tools.evaluate`` needs (verl leaves ``rollout.name`` at
       ``???``); the scripts set them again from ``run_scripts/common.sh``;
    2. the pass-through overrides after ``--`` (the engine settings of ``eval_arise.sh``, yours);
    3. the keys this tool owns: data files, sampling, val-only, resume, logger and output folders.
    """
    files = [str(Path(f).resolve()) for f in args.data]
    if check_files:
        for f in files:
            if not os.path.exists(f):
                raise FileNotFoundError(f"evaluation data file not found: {f}")
    out = Path(args.out).resolve()
    sampled = args.decoding == "sampled"
    defaults = ["actor_rollout_ref.rollout.name=vllm"]
    owned = [
        f"data.train_files={_hydra_str(files[0])}",  # required by the trainer's set-up; nothing is trained
        "data.val_files=[" + ",".join(_hydra_str(f) for f in files) + "]",
        f"actor_rollout_ref.model.path={_hydra_str(_local_or_id(args.model))}",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.k}",
        f"actor_rollout_ref.rollout.val_kwargs.do_sample={sampled}",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature if sampled else 0}",
        f"actor_rollout_ref.rollout.val_kwargs.top_p={args.top_p if sampled else 1.0}",
        "trainer.val_only=True",
        "trainer.val_before_train=True",
        "trainer.logger=['console','file']",
        f"trainer.experiment_name=eval_{args.label}",
        # everything the run writes stays under --out, whatever the cwd: trainer state (the
        # library log of a resumed checkpoint), hydra's run folder, verl's file logger (read in
        # the TaskRunner actor, so it also goes through Ray's runtime env: a Ray cluster started
        # beforehand does not see this process's environment)
        f"trainer.default_local_dir={_hydra_str(out / 'trainer_state')}",
        f"hydra.run.dir={_hydra_str(out / 'hydra')}",
        f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={_hydra_str(metrics_path(args))}",
        f"arise.enable={not args.no_skills}",
    ]
    if args.checkpoint:
        owned += [
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={_hydra_str(Path(args.checkpoint).resolve())}",
        ]
    else:
        owned += ["trainer.resume_mode=disable"]
    owned += library_overrides(args, check_files)
    return defaults + list(args.overrides) + owned


LIBRARY_CHOICES = ("final", "seeds", "none")


def library_choice(args) -> str:
    """``--library``: final (the checkpoint's library; the default with --checkpoint), seeds (the
    seed skills; the default without), none (no skills, as --no-skills), or a library file."""
    if args.no_skills:
        return "none"
    return args.library or ("final" if args.checkpoint else "seeds")


def library_overrides(args, check_files: bool = True) -> list[str]:
    """The ``arise.library.*`` keys that put the chosen library in place (``arise.enable`` for none)."""
    choice = library_choice(args)
    if choice == "none":
        return []  # arise.enable=False (owned above): the weights alone
    if choice == "final":
        if not args.checkpoint:
            raise ValueError("--library final evaluates a checkpoint's library: give --checkpoint (or CKPT=)")
        return ["arise.library.from_checkpoint=True"]
    # the checkpoint's weights (if any) with another library
    out = ["arise.library.from_checkpoint=False"]
    if choice == "seeds":
        return out + ["arise.library.load_from=null"]
    path = Path(choice).resolve()
    if check_files and not path.is_file():
        raise FileNotFoundError(f"--library {choice}: no such library file (library.parquet or skills.jsonl)")
    return out + [f"arise.library.load_from={_hydra_str(path)}"]


def metrics_path(args) -> Path:
    return Path(args.out).resolve() / "val_metrics.jsonl"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipe.arise.tools.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--combine", nargs="+", metavar="EVAL_DIR", help="only merge earlier outputs into OUT/table.md")
    parser.add_argument("--model", help="HF model path the checkpoint was trained from (architecture, tokenizer)")
    parser.add_argument("--checkpoint", help="a global_step_N folder; omit to evaluate the base model")
    parser.add_argument(
        "--library",
        help="final (the checkpoint's library; default with --checkpoint) | seeds (default without) | none "
        "(no skills, as --no-skills) | a library.parquet or exported skills.jsonl",
    )
    parser.add_argument("--data", nargs="+", help="evaluation parquet files (data_prep output)")
    parser.add_argument("--k", type=int, default=32, help="samples per problem; Pass@1 is averaged over them")
    parser.add_argument("--decoding", choices=["sampled", "greedy"], default="sampled")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--no-skills", action="store_true", help="evaluate without the ARISE pipeline (baselines)")
    parser.add_argument("--label", default=None, help="row label in the table (default: arise / no_skills)")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--print-overrides", action="store_true", help="print ENTRY=<module> and the run's overrides, start nothing"
    )
    parser.add_argument(
        "--skip-preflight",
        action="store_true",
        help="do not run recipe.arise.tools.preflight first (also SKIP_PREFLIGHT=1)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the validation run's whole output (Ray, vLLM, verl) on the console too (also VERBOSE=1); "
        "by default it goes to OUT/eval.log",
    )
    parser.add_argument("overrides", nargs="*", help="extra hydra overrides (after --)")
    args = parser.parse_args(argv)
    if args.combine:
        try:
            path = combine(args.combine, args.out)
        except (OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(Path(path).read_text())
        print(f"[eval] wrote {path}")
        return 0
    if not args.model or not args.data:
        parser.error("--model and --data are required (unless --combine)")
    if args.decoding == "greedy" and args.k != 1:
        if not args.print_overrides:
            print(f"[eval] greedy decoding gives identical samples; using k=1 instead of k={args.k}")
        args.k = 1
    if args.library == "none":
        args.no_skills = True
    choice = library_choice(args)
    default_label = {"none": "no_skills", "final": "arise", "seeds": "arise_seeds"}.get(choice)
    args.label = args.label or default_label or f"arise_{Path(choice).stem}"
    try:
        library_overrides(args, check_files=not args.print_overrides)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))

    if args.print_overrides:
        print(f"ENTRY={ENTRY}")
        print("\n".join(build_overrides(args, check_files=False)))
        return 0
    overrides = build_overrides(args)
    if not (args.skip_preflight or os.environ.get("SKIP_PREFLIGHT") == "1"):
        from recipe.arise.tools.preflight import run_preflight

        verbose = args.verbose or os.environ.get("VERBOSE") == "1"
        if run_preflight(ENTRY, overrides, brief=not verbose) != 0:  # brief: what is not OK, the verdict
            print(
                "[eval] preflight failed (see above); --skip-preflight / SKIP_PREFLIGHT=1 runs anyway", file=sys.stderr
            )
            return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = metrics_path(args)
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics)}
    cmd = [sys.executable, "-m", ENTRY, *overrides]
    data = ", ".join(Path(f).name for f in args.data)
    print(f"[eval] {args.label}: {data}, k={args.k} ({args.decoding}), {args.model}", flush=True)
    (out / "command.txt").write_text(" ".join(cmd) + "\n")  # the validation run's command line, whole
    returncode = run_validation(cmd, env, out / "eval.log", verbose=args.verbose or os.environ.get("VERBOSE") == "1")
    if returncode != 0:
        print(f"[eval] the validation run failed with exit code {returncode}", file=sys.stderr)
        return returncode
    results = collect_results(read_validation_metrics(metrics))
    evaluate_env.add_game_counts(results, args.data)  # the environments' All: each type by its games
    paths = write_outputs(results, out, args.label)
    print(Path(paths["markdown"]).read_text())
    print(f"[eval] wrote {', '.join(paths.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
