"""ALFWorld games written by the tests in ALFWorld's on-disk format (``alfworld-download`` needs
github.com, unreachable here): ``<data>/json_2.1.1/<split>/<task type>-<obj>-<mrecep>-<recep>-<scene>/
<trial>/`` with ``traj_data.json``, ``initial_state.pddl`` and ``game.tw-pddl`` (the JSON ALFWorld's
``AlfredTWEnv`` writes: the PDDL domain, the grammar with the task filled in, the problem, ``solvable``).

Each game is one room: a countertop holding the object, a sink, a microwave, a fridge (openable), a
desk with a desk lamp, and the target receptacle; the goal is the task type's PDDL goal of ALFWorld's
goal library. ``logic`` is ALFWorld's (domain, grammar) when the game is to be played (the package's
``alfworld/data/alfred.pddl`` and ``alfred.twl2``), else placeholders: the files' shape alone."""

from __future__ import annotations

import json
from pathlib import Path

# task type -> (templated task, goal): the goal's conditions beyond "obj in recep"
GOALS = {
    "pick_and_place_simple": ("put some {obj} on {recep}", ""),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "(isClean ?o)"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "(isHot ?o)"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "(isCool ?o)"),
}
LOOK = "look_at_obj_in_light"
PICK_TWO = "pick_two_obj_and_place"
# the winning actions of each generated game (AlfredDemangler's names: "<type> <n>")
_TAKE = ["go to countertop 1", "take {obj} 1 from countertop 1"]
_PLACE = ["go to {recep} 1", "move {obj} 1 to {recep} 1"]
GOLD = {
    "pick_and_place_simple": [*_TAKE, *_PLACE],
    "pick_clean_then_place_in_recep": [*_TAKE, "go to sinkbasin 1", "clean {obj} 1 with sinkbasin 1", *_PLACE],
    "pick_heat_then_place_in_recep": [*_TAKE, "go to microwave 1", "heat {obj} 1 with microwave 1", *_PLACE],
    "pick_cool_then_place_in_recep": [*_TAKE, "go to fridge 1", "cool {obj} 1 with fridge 1", *_PLACE],
    LOOK: [*_TAKE, "go to desk 1", "use desklamp 1"],
    PICK_TWO: [*_TAKE, *_PLACE, "go to countertop 1", "take {obj} 2 from countertop 1", "go to {recep} 1",
               "move {obj} 2 to {recep} 1"],
}  # fmt: skip

_NAMES = {  # ALFRED's mangled ids (type|x|y|z): AlfredDemangler turns them into "<type> <n>"
    "countertop": "CounterTop_bar__minus_01_dot_00_bar__plus_00_dot_95_bar__plus_00_dot_20",
    "sinkbasin": "Sink_bar__minus_02_dot_00_bar__plus_00_dot_90_bar__plus_00_dot_20_bar_SinkBasin",
    "microwave": "Microwave_bar__minus_03_dot_00_bar__plus_01_dot_50_bar__plus_00_dot_20",
    "fridge": "Fridge_bar__minus_04_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_20",
    "desk": "Desk_bar__minus_05_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_20",
}
_RTYPES = {"countertop": "CounterTop", "sinkbasin": "SinkBasin", "microwave": "Microwave", "fridge": "Fridge",
           "desk": "Desk", "shelf": "Shelf", "cabinet": "Cabinet"}  # fmt: skip


def _mangled(kind: str, x: int) -> str:
    return f"{kind}_bar__minus_0{x}_dot_50_bar__plus_00_dot_90_bar__plus_01_dot_10"


def problem(task_type: str, obj: str, recep: str) -> str:
    """The PDDL problem of one game: ``obj`` (e.g. "Apple") on the countertop, ``recep`` the target."""
    receps = dict(_NAMES)
    if recep.lower() not in receps:
        receps[recep.lower()] = f"{recep}_bar__minus_06_dot_00_bar__plus_00_dot_00_bar__plus_00_dot_20"
    objects = [_mangled(obj, 1)] + ([_mangled(obj, 2)] if task_type == PICK_TWO else [])
    lamp = _mangled("DeskLamp", 3)
    locs = {name: f"loc_bar_{i}_bar_{i + 1}_bar_0_bar_30" for i, name in enumerate(receps)}
    init = ["(atLocation agent1 loc_bar_9_bar_9_bar_0_bar_30)", "(openable " + receps["fridge"] + ")"]
    for name, rid in receps.items():
        rtype = _RTYPES.get(name, recep)
        init += [f"(receptacleAtLocation {rid} {locs[name]})", f"(receptacleType {rid} {rtype}Type)"]
        init += [f"(canContain {rtype}Type {obj}Type)"]
    for oid in objects:
        init += [f"(inReceptacle {oid} {receps['countertop']})", f"(objectAtLocation {oid} {locs['countertop']})"]
        init += [f"(objectType {oid} {obj}Type)", f"(pickupable {oid})", f"(cleanable {oid})"]
        init += [f"(heatable {oid})", f"(coolable {oid})"]
    init += [f"(inReceptacle {lamp} {receps['desk']})", f"(objectAtLocation {lamp} {locs['desk']})"]
    init += [f"(objectType {lamp} DeskLampType)", f"(toggleable {lamp})"]
    types = sorted({f"{t}Type" for t in [*_RTYPES.values(), recep]})
    if task_type == LOOK:
        goal = (
            f"(exists (?ot - object ?a - agent ?o - object) (and (objectType ?ot DeskLampType) (toggleable ?ot) "
            f"(isToggled ?ot) (objectType ?o {obj}Type) (holds ?a ?o)))"
        )
    elif task_type == PICK_TWO:
        goal = (
            f"(exists (?r - receptacle ?o1 - object ?o2 - object) (and (receptacleType ?r {recep}Type) "
            f"(objectType ?o1 {obj}Type) (objectType ?o2 {obj}Type) (inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r) "
            "(not (= ?o1 ?o2))))"
        )
    else:
        extra = GOALS[task_type][1]
        goal = (
            f"(exists (?r - receptacle ?o - object) (and (inReceptacle ?o ?r) (objectType ?o {obj}Type) "
            f"(receptacleType ?r {recep}Type) {extra}))"
        )
    return "\n".join(
        [
            "(define (problem plan_trial)",
            "(:domain alfred)",
            "(:objects",
            "agent1 - agent",
            *[f"{t} - rtype" for t in types],
            f"{obj}Type - otype",
            "DeskLampType - otype",
            *[f"{o} - object" for o in [*objects, lamp]],
            *[f"{r} - receptacle" for r in receps.values()],
            *[f"{loc} - location" for loc in [*locs.values(), "loc_bar_9_bar_9_bar_0_bar_30"]],
            ")",
            "(:init",
            *init,
            ")",
            f"(:goal (and {goal}))",
            ")",
        ]
    )


def task_text(task_type: str, obj: str, recep: str) -> str:
    if task_type == LOOK:
        return f"look at {obj.lower()} under the desklamp"
    if task_type == PICK_TWO:
        return f"put two {obj.lower()} in {recep.lower()}"
    return GOALS[task_type][0].format(obj=obj.lower(), recep=recep.lower())


def write_game(
    data: Path,
    split: str,
    task_type: str,
    obj: str = "Apple",
    recep: str = "Shelf",
    scene: int = 1,
    trial: str = "trial_T20190001_000000_000001",
    logic: tuple[str, str] | None = None,
    skip: tuple[str, ...] = (),
) -> Path:
    """Write one game; returns its folder. ``skip``: file names left out (an incomplete folder)."""
    folder = Path(data) / "json_2.1.1" / split / f"{task_type}-{obj}-None-{recep}-{scene}" / trial
    folder.mkdir(parents=True, exist_ok=True)
    pddl = problem(task_type, obj, recep)
    task = task_text(task_type, obj, recep)
    traj = {
        "task_type": task_type,
        "pddl_params": {"object_target": obj, "parent_target": recep, "toggle_target": "DeskLamp",
                        "mrecep_target": "", "object_sliced": False},
        "turk_annotations": {"anns": [{"task_desc": task}]},
        "scene": {"scene_num": scene},
    }  # fmt: skip
    domain, grammar = logic or ("(define (domain alfred))", '"task": [{"rhs": "Your task is to: UNKNOWN GOAL."}]')
    game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", task), "pddl_problem": pddl}
    files = {
        "traj_data.json": json.dumps(traj),
        "initial_state.pddl": pddl,
        "game.tw-pddl": json.dumps({**game, "solvable": True}),
    }
    for name, text in files.items():
        if name not in skip:
            (folder / name).write_text(text)
    return folder


def alfworld_logic() -> tuple[str, str]:
    """ALFWorld's own domain and grammar (needs the ``alfworld`` package)."""
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()
