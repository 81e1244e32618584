"""Run upstream verl's launch scripts through this project's entry points and count what is accepted.

Usage::

    PYTHONPATH=$PWD python scripts/upstream_scripts.py /work/.mirror/verl-project+verl/repo [GIT_DIR ...]
        [--folder-depth 1] [--top 25] [--show rejected|refused|unfaithful|all] [--json OUT.json]

For each upstream git directory (no work tree needed): the ``examples/`` tree at ``HEAD`` (and the asynchronous
trainers' ``verl/experimental/*/shell/``, :data:`SCRIPT_DIRS`) is extracted to a temporary
directory (``git archive``; nothing is fetched), and every ``*.sh`` is run with ``bash`` from that copy's root with
stub executables first on ``PATH`` (``python``, ``python3``, ``torchrun``, ``uv``, ``ray``, ``nvidia-smi``, ``hf``,
``huggingface-cli``, ``git``, ``pip``, ``wget``): each records its argv and exits 0 (``python -c ...``, such as the
``import torch_npu`` probe, exits 1 so scripts pick the GPU branch; a program read from stdin, the
``python3 - <<EOF ... get_device_name()`` probe, prints ``cuda``). Every recorded ``-m verl.<module> ...`` call is
then run in-process through this project's ``<module>.main(argv + ["--cfg", "job"])`` and classified:

* ``accepted``: exit 0; ``faithful`` when additionally every ``key=value`` override of the call is found at its key
  (after the schema's key aliases) in the printed config, with the value the script gave.
* ``refused``: exit 2 with one line that names an engine or feature this project does not have (the line says so).
* ``rejected``: anything else; its first error line is the blocking reason (for a key: the key, grouped in the
  "top blocking keys" table). A module that upstream's own tree lacks too is said so (the script is stale upstream).

A script that makes no ``-m verl.*`` call (data preparation, a script that exits early) is listed as ``no-call``.

A git directory of ``verl-project/verl-recipe`` (no ``examples/``; each recipe a top-level folder, checked out by
upstream as verl's ``recipe/`` submodule) is extracted under ``recipe/`` and all its ``*.sh`` are run from the
parent, as upstream runs them. Calls of ``-m verl.*`` are classified as above. Calls of a recipe's own entry point
(``-m recipe.<name>.main_<name>``) run upstream's trainer subclass of its own, which this project does not run: the
recipes whose trainer is built into ``main_ppo`` (:data:`RECIPE_MAINS`: DAPO's dynamic sampling; the entropy recipe's
DAPO trainer with the clip-cov / kl-cov losses; GVPO's loss with whole groups per rank; SPPO's estimator and loss;
SPIN's online DPO with the reference refreshed every ``trainer.ref_update_freq`` steps; FlowRL's loss; SPO's tracked
prompt values under its ``trainer.spo`` keys; synchronous partial rollouts, on upstream's own ``ppo_trainer`` config)
are run as ``verl.trainer.main_ppo --config-path recipe/<name>/config --config-name <its config>`` with what the
recipe's trainer always does (:data:`RECIPE_SETTINGS`) and the script's arguments; the others are ``refused`` with
the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# executables a script may call; each stub records its argv (python -c exits 1, everything else 0)
STUB_NAMES = ("python", "python3", "torchrun", "uv", "ray", "nvidia-smi", "hf", "huggingface-cli", "git", "pip", "wget")
REFUSAL_MARKERS = (
    # a security switch the user must set (verl/utils/security.py): refused as written, accepted once it is set
    "is not allowed here unless",
    "is not an engine here",
    "is not a device here",
    "is not implemented here",
    "not available here",
    "is not supported here",
)


# recipe entry points (verl-recipe) whose trainer is main_ppo's own: module -> its Hydra config name
RECIPE_MAINS = {
    "recipe.dapo.main_dapo": "dapo_trainer",  # RayDAPOTrainer: algorithm.filter_groups + data.gen_batch_size
    "recipe.entropy.main_entropy": "entropy_trainer",  # DAPO's trainer; clip_cov / kl_cov are policy_loss modes
    "recipe.gvpo.gvpo_main_ppo": "gvpo_trainer",  # RayGVPOTrainer: whole groups per rank; gvpo is a policy_loss mode
    "recipe.sppo.main_sppo": "sppo_trainer",  # RaySPPOTrainer: see RECIPE_SETTINGS
    "recipe.spin.main_spin": "spin_trainer",  # SPIN's online DPO trainer: see RECIPE_SETTINGS
    "recipe.flowrl.main_flowrl": "flowrl_trainer",  # the PPO trainer with FlowRL's actor: see RECIPE_SETTINGS
    # SPO's trainer: tracked prompt values and priority draws under its trainer.spo keys (algorithm.spo here)
    "recipe.spo.spo_main_ppo": "spo_trainer",
    # PartialRolloutRayPPOTrainer on upstream's own ppo_trainer config (None: no config of the recipe's own):
    # synchronous partial rollouts, see RECIPE_SETTINGS
    "recipe.partial_rollout.main_ppo": None,
}

# what a recipe's own trainer does regardless of its config, as main_ppo's keys (given before the script's own)
RECIPE_SETTINGS = {
    # the SPPO trainer always centres rewards on their soft mean and its actor always fits the SPPO loss
    "recipe.sppo.main_sppo": ["algorithm.adv_estimator=sppo", "actor_rollout_ref.actor.policy_loss.loss_mode=sppo"],
    # SPIN's trainer ranks each prompt's two responses by reward and fits DPO on the pair (online_dpo); the ranking
    # needs only the reward's order, which GRPO's centred advantage keeps
    "recipe.spin.main_spin": [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=online_dpo",
        "actor_rollout_ref.rollout.n=2",
    ],
    # FlowRL's actor always fits the trajectory-balance loss with its log Z head
    "recipe.flowrl.main_flowrl": ["actor_rollout_ref.actor.policy_loss.loss_mode=flowrl"],
    # the recipe's trainer always generates two batches' groups and continues the unfinished ones next step
    "recipe.partial_rollout.main_ppo": ["async_training.partial_rollout=true"],
}


@dataclass
class Call:
    """One recorded ``-m <module> ...`` invocation of a script and how our entry point took it."""

    script: str
    module: str
    args: list[str]
    status: str = ""  # accepted | refused | rejected
    faithful: bool = False
    reason: str = ""  # first error line (rejected/refused) or the first unfaithful key (accepted)
    errors: list[str] = field(default_factory=list)  # every error line (rejected)
    unfaithful: list[str] = field(default_factory=list)


def _stub_text(name: str, log: str) -> str:
    """A POSIX shell stub for ``name`` appending ``{"exe": name, "argv": [...]}`` lines to ``log``."""
    recorder = (
        "import json, sys; open(sys.argv[1], 'a').write(json.dumps({'exe': sys.argv[2], 'argv': sys.argv[3:]}) + '\\n')"
    )
    fail_c = 'case "$1" in -c) exit 1;; esac\n' if name.startswith("python") else ""
    # a program read from stdin as the last argument (`python3 - <<EOF`, `uv run ... python3 -`) is the scripts'
    # device probe (`print(get_device_name())`): it answers cuda, so the script takes its GPU branch
    probe = 'for last in "$@"; do :; done\nif [ "${last:-}" = "-" ]; then cat >/dev/null; echo cuda; fi\n'
    return (
        "#!/bin/sh\n"
        f'{sys.executable} -c {shlex.quote(recorder)} {shlex.quote(log)} {shlex.quote(name)} "$@"\n'
        f"{fail_c}{probe}exit 0\n"
    )


def make_stubs(directory: str, log: str) -> None:
    """Write the recording stubs into ``directory`` (put first on ``PATH``)."""
    os.makedirs(directory, exist_ok=True)
    for name in STUB_NAMES:
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(_stub_text(name, log))
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)


def is_recipe_repo(git_dir: str) -> bool:
    """Whether ``git_dir`` is verl-recipe (no ``examples/`` or ``verl/`` tree at ``HEAD``) rather than verl."""
    names = subprocess.run(
        ["git", "--git-dir", git_dir, "ls-tree", "--name-only", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.split()
    return "examples" not in names and "verl" not in names


# launch-script folders of verl's tree besides examples/: the asynchronous trainers' scripts (v0.9) live with them
SCRIPT_DIRS = ("examples", "verl/experimental/fully_async_policy/shell", "verl/experimental/one_step_off_policy/shell")


def extract_examples(git_dir: str, dest: str) -> list[str]:
    """``git archive HEAD`` of ``git_dir``'s script folders (:data:`SCRIPT_DIRS` that exist; for verl-recipe: the
    whole tree under ``recipe/``) unpacked under ``dest``; returns the ``*.sh`` paths (relative), without
    verl-recipe's ``install_verl.sh``."""
    recipe = is_recipe_repo(git_dir)
    cmd = ["git", "--git-dir", git_dir, "archive", "--format=tar"]
    if recipe:
        cmd += ["--prefix=recipe/", "HEAD"]
        tops = ["recipe"]
    else:
        tops = [d for d in SCRIPT_DIRS if _has_path(git_dir, d)]
        cmd += ["HEAD", *tops]
    archive = subprocess.run(cmd, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    found = []
    for top in tops:
        for base, _dirs, files in os.walk(os.path.join(dest, top)):
            found.extend(os.path.relpath(os.path.join(base, f), dest) for f in files if f.endswith(".sh"))
    return sorted(f for f in found if f != "recipe/install_verl.sh")


def _has_path(git_dir: str, path: str) -> bool:
    listed = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "HEAD", path], capture_output=True, text=True)
    return bool(listed.stdout.strip())


def recipe_main_call(module: str, args: list[str], tree: str) -> tuple[str, list[str]] | str:
    """A verl-recipe entry-point call as the ``verl.trainer.main_ppo`` call that trains the same algorithm
    (:data:`RECIPE_MAINS`; the script's ``--config-path`` / ``--config-name`` win over the recipe's own config), or
    the reason it is not run here."""
    if module not in RECIPE_MAINS:
        return (
            f"{module} is the recipe's own program (a trainer subclass or script written against upstream verl's "
            "internal classes), which is not run here; a recipe of this project subclasses its trainer "
            "(docs/porting_from_verl.md)"
        )
    own = RECIPE_MAINS[module]
    config_dir = os.path.join(tree, *module.split(".")[:-1], "config") if own is not None else None
    rest, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in ("--config-path", "-cp", "--config-name", "-cn") and i + 1 < len(args):
            if arg in ("--config-path", "-cp"):
                config_dir = args[i + 1] if os.path.isabs(args[i + 1]) else os.path.join(tree, args[i + 1])
            rest += [arg, args[i + 1]] if arg in ("--config-name", "-cn") else []
            i += 2
            continue
        if arg.startswith(("--config-path=", "-cp=")):
            value = arg.split("=", 1)[1]
            config_dir = value if os.path.isabs(value) else os.path.join(tree, value)
        else:
            rest.append(arg)
        i += 1
    rest[:0] = RECIPE_SETTINGS.get(module, [])
    if own is not None and not any(a.startswith(("--config-name", "-cn")) for a in rest):
        rest.insert(0, f"--config-name={own}")
    return "verl.trainer.main_ppo", ([f"--config-path={config_dir}"] if config_dir else []) + rest


def record_calls(
    script: str,
    workdir: str,
    stub_dir: str,
    timeout: float = 30.0,
    args: tuple[str, ...] | list[str] = (),
    env_vars: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run one script (with positional ``args`` and the variables ``env_vars``) under the stubs; returns the
    recorded calls in order."""
    log = os.path.join(stub_dir, "calls.jsonl")
    if os.path.exists(log):
        os.remove(log)
    home = os.path.join(stub_dir, "home")
    os.makedirs(home, exist_ok=True)
    env = {
        "PATH": f"{stub_dir}:/usr/bin:/bin",
        "HOME": home,
        "VERL_USE_UV": "1",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
    }
    env.update({k: v for k, v in (env_vars or {}).items() if k not in ("PATH", "HOME")})
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            ["bash", script, *args],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def module_call(argv: list[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` of a recorded argv holding ``-m verl.<module> ...`` or a recipe's ``-m recipe.<...>``
    (``uv run ... python3 -m``, torchrun)."""
    for i, tok in enumerate(argv[:-1]):
        if tok == "-m" and argv[i + 1].startswith(("verl.", "recipe.")):
            return argv[i + 1], argv[i + 2 :]
    return None


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "config error" in ln.lower() and ln.endswith(":"):
            continue
        return ln
    return ""


def _error_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().splitlines() if ln.strip()]


def run_call(call: Call, cwd: str) -> None:
    """Run ``call`` through this project's entry point (in-process, ``--cfg job``, from ``cwd``: the script's
    directory of launch) and classify it in place."""
    import yaml

    if call.module == "verl.model_merger":
        merger_call(call)
        return
    try:
        mod = importlib.import_module(call.module)
        # a package run as `python -m pkg` (verl.model_merger) has its main() in pkg.__main__
        main = mod.main if hasattr(mod, "main") else importlib.import_module(f"{call.module}.__main__").main
    except Exception as e:  # noqa: BLE001 - a module we lack is a rejection with its reason
        call.status, call.reason = "rejected", f"module {call.module}: {type(e).__name__}: {e}"
        return
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([*call.args, "--cfg", "job"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - a crash is a rejection with its reason
        call.status, call.reason = "rejected", f"crash: {type(e).__name__}: {e}"
        return
    finally:
        os.chdir(here)
    if rc != 0:
        lines = [re.sub(r"^python -m \S+: ", "", ln) for ln in _error_lines(err.getvalue())]
        lines = [ln for ln in lines if not ln.startswith("warning")]
        body = [ln[2:] if ln.startswith("- ") else ln for ln in lines if not re.match(r"^invalid config \(", ln)]
        call.errors = body or [f"exit {rc}"]
        if len(body) == 1 and any(m in body[0] for m in REFUSAL_MARKERS):
            call.status, call.reason = "refused", body[0]
        else:
            call.status, call.reason = "rejected", call.errors[0]
        return
    call.status = "accepted"
    cfg = yaml.safe_load(out.getvalue())
    call.unfaithful = unfaithful_keys(mod, call.args, cfg) + added_unread(err.getvalue())
    call.faithful = not call.unfaithful
    call.reason = call.unfaithful[0] if call.unfaithful else ""


def added_unread(stderr: str) -> list[str]:
    """The keys a call added with ``+`` that are not keys of this project's config (the loader warns for each:
    nothing built in reads them), as unfaithful lines: upstream's code may read what ours ignores."""
    found = re.findall(r"warning: (\S+): added with \+, but it is not a key of this config", stderr)
    return [f"{key}: added with +, not a key here (nothing reads it)" for key in found]


def merger_call(call: Call) -> None:
    """Classify a ``python -m verl.model_merger ...`` call by its arguments alone (the checkpoint it names exists only
    after a training run): accepted when they parse, refused when a flag is refused in one line, else rejected."""
    from verl.model_merger.__main__ import _refused_flag, build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(call.args)
    except SystemExit:
        call.status = "rejected"
        call.errors = _error_lines(err.getvalue())[-1:] or ["argument error"]
        call.reason = call.errors[0]
        return
    refused = _refused_flag(args)
    if refused:
        call.status, call.reason, call.errors = "refused", refused, [refused]
        return
    call.status, call.faithful = "accepted", True


def unfaithful_keys(module: Any, args: list[str], cfg: Any) -> list[str]:
    """The ``key=value`` overrides of ``args`` whose value is not found at their key in the printed ``cfg``
    (Hydra's own ``hydra.*`` keys and config-group choices such as ``model_engine=fsdp`` are not config keys)."""
    from verl.trainer.config.script_check import override_found, schema_aliases

    aliases = schema_aliases(module)
    kept = []
    last = {a.split("=", 1)[0].lstrip("+"): i for i, a in enumerate(args) if "=" in a}
    for i, a in enumerate(args):
        if "=" not in a or a.startswith(("-", "hydra.", "~")) or "." not in a.split("=", 1)[0]:
            continue
        if last[a.split("=", 1)[0].lstrip("+")] != i:
            continue  # a key given twice: the last value is the one that counts (as in Hydra)
        try:
            found = override_found(a, cfg, aliases)
        except Exception:  # noqa: BLE001 - an override our parser refuses is not found
            found = False
        if (
            not found
            and not converted_micro_size(a, cfg)
            and not accepted_as_inert(a)
            and not null_function_name(a, cfg)
            and not streamed_batch_size(a, cfg)
            and not unfiltered_generation_batch(a, cfg)
        ):
            kept.append(a)
    return kept


def accepted_as_inert(override: str) -> bool:
    """Whether ``override`` gives one of upstream's keys with no setting here a value accepted as upstream's default
    (verl/trainer/config/v09_inert_keys.py): it asks for what runs, and the config drops it."""
    import yaml

    from verl.trainer.config.v09_inert_keys import inert_keys

    key, _, text = override.lstrip("+").partition("=")
    entry = inert_keys().get(key)
    if entry is None or entry.follows is not None:
        return False
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        return False
    return entry.accepts(value)


def null_function_name(override: str, cfg: Any) -> bool:
    """Whether ``override`` is ``reward.custom_reward_function.name=null`` (or the legacy key), which the config
    keeps as the default name (verl/trainer/config/reward_section.py): upstream's e2e script passes it with
    ``path=null``."""
    from verl.trainer.config.script_check import value_at

    key, _, text = override.lstrip("+").partition("=")
    if key not in ("reward.custom_reward_function.name", "custom_reward_function.name"):
        return False
    return text.strip().strip("'\"").lower() in ("null", "none", "~", "") and value_at(cfg, key) == "compute_score"


def unfiltered_generation_batch(override: str, cfg: Any) -> bool:
    """Whether ``override`` is a ``data.train_batch_size`` that the config replaced by ``data.gen_batch_size``
    because dynamic sampling is off in synchronous training: upstream's trainers then train on the whole generation
    batch (verl/trainer/config/algorithm_checks.py, ``fit_generation_batch``)."""
    from verl.trainer.config.script_check import value_at

    key = override.lstrip("+").partition("=")[0]
    if key != "data.train_batch_size" or value_at(cfg, "async_training.mode") is not None:
        return False
    if value_at(cfg, "algorithm.filter_groups.enable"):
        return False
    gen = value_at(cfg, "data.gen_batch_size")
    return gen is not None and value_at(cfg, "data.train_batch_size") == gen


def streamed_batch_size(override: str, cfg: Any) -> bool:
    """Whether ``override`` is upstream's fully asynchronous streaming layout (``data.train_batch_size=0``,
    ``data.gen_batch_size=1``) that the config turned into batches of ``actor.ppo_mini_batch_size`` prompts
    (verl/trainer/config/async_layout.py, ``resolve_async_layout``)."""
    from verl.trainer.config.script_check import value_at

    key, _, value = override.lstrip("+").partition("=")
    if value_at(cfg, "async_training.mode") != "fully_async":
        return False
    batched = value_at(cfg, "data.train_batch_size") == value_at(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if key == "data.train_batch_size" and value.strip() == "0":
        return batched
    return key == "data.gen_batch_size" and batched and value_at(cfg, "data.gen_batch_size") is None


def converted_micro_size(override: str, cfg: Any) -> bool:
    """Whether ``override`` is a deprecated global micro-batch size (``actor.ppo_micro_batch_size=N``, ...) that the
    config kept as upstream's workers use it: ``N // (ranks // ulysses size)`` in the per-rank key, the global one
    cleared (verl/trainer/config/upstream_keys.py, ``_GLOBAL_MICRO_SIZES``)."""
    from verl.trainer.config.script_check import value_at
    from verl.trainer.config.upstream_keys import _GLOBAL_MICRO_SIZES

    key, _, value = override.lstrip("+").partition("=")
    for section, old, new, sp_section in _GLOBAL_MICRO_SIZES:
        if key != f"{section}.{old}" or not value.strip().isdigit():
            continue
        ranks = int(value_at(cfg, "trainer.nnodes")) * int(value_at(cfg, "trainer.n_gpus_per_node"))
        dp = max(ranks // int(value_at(cfg, f"{sp_section}.ulysses_sequence_parallel_size") or 1), 1)
        return value_at(cfg, f"{section}.{new}") == int(value) // dp
    return False


def blocking_key(reason: str) -> str:
    """The config key (or module, or config file) an error line is about: ``a.b.c: unknown key ...`` -> ``a.b.c``."""
    if reason.startswith("module "):
        return reason.split(":")[0]
    m = re.search(r"config (?:file \S*/|')([\w.-]+?)(?:\.yaml)?[:']", reason)
    if m and reason.startswith(("config", "command line")):
        return f"--config-name {m.group(1)}"
    m = re.match(r"^(?:override '\+*([\w.@/-]+)=[^']*': )", reason)
    if m:
        return m.group(1)
    m = re.match(r"^([A-Za-z_][\w.@/-]*)(?:=\S*)?(?::| )", reason)
    return m.group(1) if m else reason[:80]


def upstream_has_module(git_dir: str, module: str) -> bool:
    """Whether upstream's ``HEAD`` has ``module`` (``a/b.py`` or the package ``a/b/__init__.py``)."""
    path = module.replace(".", "/")
    for candidate in (f"{path}.py", f"{path}/__init__.py"):
        done = subprocess.run(["git", "--git-dir", git_dir, "cat-file", "-e", f"HEAD:{candidate}"], capture_output=True)
        if done.returncode == 0:
            return True
    return False


def upstream_config_lacks(git_dir: str, reason: str) -> bool:
    """Whether ``reason`` is an unknown key (``KEY: unknown key``) or a bad value of a bool key (``KEY: expected
    bool, got ''``: an unset shell variable) that upstream's own generated PPO config would refuse as well: the key
    is not in it, or the value is empty (Hydra gives ``''``, which upstream's typed ``bool`` field refuses too)."""
    match = re.match(r"([\w.]+): (unknown key|expected bool, got '')", reason)
    if not match:
        return False
    if match.group(2).startswith("expected"):
        return True
    import yaml

    shown = subprocess.run(
        ["git", "--git-dir", git_dir, "show", "HEAD:verl/trainer/config/_generated_ppo_trainer.yaml"],
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        return False
    node: Any = yaml.safe_load(shown.stdout)
    for part in match.group(1).split("."):
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False


def hydra_refuses_override(reason: str) -> bool:
    """Whether ``reason`` is a malformed override (``override ' ': expected key=value``) that Hydra's own override
    parser refuses too, e.g. the lone space a ``\\  # comment`` line continuation leaves in a shell script."""
    match = re.match(r"override '(.*)': expected key=value", reason)
    if not match:
        return False
    text = match.group(1)
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:  # without Hydra: a blank override is the one case known to be refused by it
        return not text.strip()
    try:
        OverridesParser.create().parse_overrides([text])
    except Exception:  # noqa: BLE001 - Hydra's OverrideParseException and its lexer errors
        return True
    return False


def measure(
    git_dir: str, timeout: float, tree: str | None = None, verl_git_dir: str | None = None
) -> tuple[list[Call], list[str]]:
    """All calls of all scripts of one snapshot, classified; and the scripts that made no ``-m verl.*`` call.
    ``tree``: extract the scripts there and keep them (the recipe calls name config files in it), else a temporary
    directory. ``verl_git_dir``: for verl-recipe, the verl snapshot its scripts are checked against for staleness
    (a key upstream's own config refuses too); without it, verl-recipe calls are not checked for staleness."""
    calls: list[Call] = []
    no_call: list[str] = []
    recipe = is_recipe_repo(git_dir)
    upstream = verl_git_dir if recipe else git_dir
    with tempfile.TemporaryDirectory(prefix="upstream_scripts_") as tmp:
        work = tree or os.path.join(tmp, "tree")
        os.makedirs(work, exist_ok=True)
        scripts = extract_examples(git_dir, work)
        stub_dir = os.path.join(tmp, "stubs")
        make_stubs(stub_dir, os.path.join(stub_dir, "calls.jsonl"))
        for rel in scripts:
            found = [mc for rec in record_calls(rel, work, stub_dir, timeout) if (mc := module_call(rec["argv"]))]
            if not found:  # SFT scripts take <nproc_per_node> <save_path> first
                ckpt = os.path.join(tmp, "ckpt")
                recs = record_calls(rel, work, stub_dir, timeout, ["8", ckpt])
                found = [mc for rec in recs if (mc := module_call(rec["argv"]))]
            if not found:
                no_call.append(rel)
            for module, args in found:
                if module.startswith("recipe."):
                    translated = recipe_main_call(module, args, work)
                    if isinstance(translated, str):
                        calls.append(Call(rel, module, args, status="refused", reason=translated))
                        continue
                    module, args = translated
                call = Call(rel, module, args)
                run_call(call, work)
                if upstream is None:
                    pass  # verl-recipe without a verl snapshot: nothing to check staleness against
                elif call.reason.startswith("module ") and not upstream_has_module(upstream, module):
                    call.reason += " (upstream's own tree has no such module either: the script is stale upstream)"
                elif upstream_config_lacks(upstream, call.reason):
                    call.reason += " (upstream's own config refuses it too: the script is stale upstream)"
                elif hydra_refuses_override(call.reason):
                    call.reason += " (Hydra's override parser refuses it too: the script is stale upstream)"
                calls.append(call)
    return calls, no_call


def folder_of(script: str, depth: int) -> str:
    """The table row of ``script``: its folders under ``examples/`` (or ``recipe/``) to ``depth``; a script
    folder of verl's own tree (``verl/experimental/fully_async_policy/shell``) is its row whole."""
    if not script.startswith(("examples/", "recipe/")):
        return os.path.dirname(script)
    parts = script.split("/")[1:-1]  # without examples/ and the file name
    return "/".join(parts[:depth]) or "."


def report(label: str, calls: list[Call], no_call: list[str], depth: int, top: int, show: str) -> str:
    """A per-folder table (scripts: accepted / faithful / refused / rejected / total) and the top blocking keys.

    A script counts once, by its worst call (rejected < refused < accepted-unfaithful < faithful).
    """
    rank = {"rejected": 0, "refused": 1, "accepted": 2}
    per_script: dict[str, Call] = {}
    for c in calls:
        prev = per_script.get(c.script)
        key = (rank[c.status], c.faithful)
        if prev is None or key < (rank[prev.status], prev.faithful):
            per_script[c.script] = c
    table: dict[str, Counter] = defaultdict(Counter)
    for s, c in per_script.items():
        row = table[folder_of(s, depth)]
        row[c.status] += 1
        row["faithful"] += int(c.status == "accepted" and c.faithful)
        row["total"] += 1
    for s in no_call:
        table[folder_of(s, depth)]["no-call"] += 1
    lines = [f"## {label}", "", "| folder | accepted | faithful | refused | rejected | total | no-call |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    total: Counter = Counter()
    for folder in sorted(table):
        row = table[folder]
        total.update(row)
        lines.append(
            f"| {folder} | {row['accepted']} | {row['faithful']} | {row['refused']} | {row['rejected']} | "
            f"{row['total']} | {row['no-call']} |"
        )
    lines.append(
        f"| **all** | {total['accepted']} | {total['faithful']} | {total['refused']} | {total['rejected']} | "
        f"{total['total']} | {total['no-call']} |"
    )
    blocking = Counter(
        k for c in per_script.values() if c.status == "rejected" for k in {blocking_key(e) for e in c.errors}
    )
    unfaithful = Counter(k.split("=", 1)[0].lstrip("+") for c in per_script.values() for k in c.unfaithful)
    lines += ["", "Top blocking keys (rejected scripts naming each, any error line of the script's worst call):", ""]
    lines += [f"- {n} {k}" for k, n in blocking.most_common(top)]
    if unfaithful:
        lines += ["", "Keys not found at their key with the script's value (accepted scripts):", ""]
        lines += [f"- {n} {k}" for k, n in unfaithful.most_common(top)]
    if show != "none":
        lines += ["", "Scripts:", ""]
        for s, c in sorted(per_script.items()):
            status = "faithful" if c.status == "accepted" and c.faithful else c.status
            if show == "all" or show == status or (show == "unfaithful" and status == "accepted"):
                lines.append(f"- {status:9s} {s}: {c.reason}")
    return "\n".join(lines) + "\n"


def snapshot_head(git_dir: str) -> str:
    """``<short hash> <commit date>`` of ``git_dir``'s ``HEAD``."""
    return subprocess.run(
        ["git", "--git-dir", git_dir, "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """Measure every given upstream snapshot; prints the tables (and writes every call as JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("git_dirs", nargs="+", help="upstream verl git directories (e.g. /work/.mirror/.../repo)")
    parser.add_argument("--folder-depth", type=int, default=1, help="folder levels under examples/ per table row")
    parser.add_argument("--top", type=int, default=25, help="blocking keys listed")
    shows = ["none", "all", "rejected", "refused", "accepted", "faithful"]
    parser.add_argument("--show", default="none", choices=shows, help="list the scripts of one class (or all)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per script run with the stubs")
    parser.add_argument("--json", help="write every classified call to this file")
    parser.add_argument(
        "--verl",
        help="for a verl-recipe git directory: the verl git directory its scripts are "
        "checked against for staleness (keys upstream's own config refuses too)",
    )
    parser.add_argument(
        "--tree",
        help="extract the scripts here and keep them (scripts/upstream_scripts_step.py "
        "reads the recipe config files of the --json calls from it)",
    )
    args = parser.parse_args(argv)
    dump: dict[str, Any] = {}
    for git_dir in args.git_dirs:
        tree = os.path.join(args.tree, os.path.basename(os.path.dirname(git_dir.rstrip("/")))) if args.tree else None
        calls, no_call = measure(git_dir, args.timeout, tree, args.verl)
        head = snapshot_head(git_dir)
        sys.stdout.write(report(f"{git_dir} ({head})", calls, no_call, args.folder_depth, args.top, args.show) + "\n")
        dump[git_dir] = {"head": head, "calls": [asdict(c) for c in calls], "no_call": no_call, "tree": tree}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
