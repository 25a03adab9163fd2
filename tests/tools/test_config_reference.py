"""docs/config.md is generated (``python -m recipe.arise.tools.config_reference``) and kept current here;
the run scripts' environment variables are read from run_scripts/common.sh, each with a line of help."""

from __future__ import annotations

import re
from pathlib import Path

from recipe.arise.core.arise_config import config_keys
from recipe.arise.tools import config_reference
from recipe.arise.tools.config_reference import env_vars, main, reference

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "python -m recipe.arise.tools.config_reference > docs/config.md"


def test_docs_config_md_is_current():
    assert (ROOT / "docs" / "config.md").read_text() == reference(), f"docs/config.md is stale: {REGENERATE}"


def test_the_reference_lists_every_key_and_every_variable():
    text = reference()
    for k in config_keys():
        assert f"| `{k.key}` |" in text
    names = {v.name for v in env_vars()}
    assert {"GPUS_PER_NODE", "TRAIN_BATCH", "CKPT_DIR", "PRESET", "CPU"} <= names
    for name in names:
        assert f"| `{name}` |" in text


def test_every_variable_of_common_sh_says_what_it_is():
    # help: the trailing comment of its line, or the hydra override(s) it feeds
    bare = [v.name for v in env_vars() if not v.help and not v.sets]
    assert bare == [], f"run_scripts/common.sh: give these a trailing `# comment`: {bare}"


def test_common_sh_parsing(tmp_path):
    script = tmp_path / "common.sh"
    script.write_text(
        "# LR=${LR:-9}  a comment line is not read\n"
        "LR=${LR:-1e-6}                # the learning rate\n"
        'DATA=$(abspath "${DATA:-$HOME/d${TOOL:+_t}}")  # the data\n'
        "MAX_LEN=${MAX_LEN:-$((${P:-1024} + 2))}\n"
        "  a) PAD=${PAD:-True} ;;\n"
        "  *) PAD=${PAD:-False} ;;\n"
        'if [ "${CPU:-0}" = 1 ]; then  # 1: on CPU\n'
        "OVERRIDES=(\n"
        "  actor.optim.lr=$LR\n"
        "  model.pad=$PAD\n"
        '  hydra.run.dir=$(abspath "$DATA")\n'
        ")\n"
        '[ -n "${SEQS:-}" ] && OVERRIDES+=(rollout.max_num_seqs=$SEQS)\n'
        "echo ${status#* }  # not a default\n"
        "# the console filter (SEEN=1: every line)\n"
        'awk -v all="${SEEN:-0}"\n'
    )
    got = {v.name: v for v in env_vars(script)}
    assert list(got) == ["LR", "DATA", "MAX_LEN", "P", "PAD", "CPU", "SEQS", "SEEN"]
    assert (got["SEEN"].default, got["SEEN"].help) == ("0", "SEEN=1: every line")  # from a comment naming it
    assert (got["LR"].default, got["LR"].help, got["LR"].sets) == ("1e-6", "the learning rate", ["actor.optim.lr"])
    assert (got["DATA"].default, got["DATA"].help, got["DATA"].sets) == (
        "$HOME/d${TOOL:+_t}",
        "the data",
        ["hydra.run.dir"],
    )
    assert got["MAX_LEN"].default == "$((${P:-1024} + 2))" and got["P"].default == "1024"
    assert got["PAD"].default == "True or False" and got["PAD"].sets == ["model.pad"]
    assert (got["CPU"].default, got["CPU"].help) == ("0", "1: on CPU")
    assert (got["SEQS"].default, got["SEQS"].sets) == ("", ["rollout.max_num_seqs"])


def test_the_ablation_group_is_what_the_ablation_scripts_switch():
    script = (ROOT / "run_scripts" / "arise.sh").read_text()
    switched = set(re.findall(r"ABLATION_OVERRIDES=\((arise\.[\w.]+)=", script))
    assert switched == {f"{k.key}" for k in config_keys() if k.group == "ablation"}


def test_check_flags_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "config.md"
    stale.write_text(reference().replace("arise.selection.gate", "arise.selection.gat", 1))
    assert main(["--check", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    stale.write_text(reference())
    assert main(["--check", str(stale)]) == 0
    assert config_reference.COMMON_SH.is_file()
