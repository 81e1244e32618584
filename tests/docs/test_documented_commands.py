"""Every shell command of README.md and docs/*.md runs as written, in a shortened form.

"Shortened" means what the test adds, never an edit of the docs: a trainer command is run with ``--cfg job`` (its
config is built and validated from exactly the words on the page, as the real run would), a script is asked for its
``--help`` and must know every option the page passes, a launch script runs with ``python`` standing in a stub that
records the trainer command, which is then checked the same way, and small Python snippets run for real (``/tmp/``
paths moved into the test's directory). Commands for other programs (``curl``, ``ray``, ``git``) and ``make`` targets
are checked for what can be checked here (the target exists). Words a reader must fill in (``...``, ``<your dir>``)
are dropped. A page is read as a person with the environment active would (README: ``. .venv/bin/activate``), so
``python`` is this interpreter. The runs the issue named (the agent-loop page, async, GKD) also run for real in
their own tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import stat
import subprocess
import sys

import pytest

from tests.docs.doc_commands import ROOT, DocCommand, all_commands

COMMANDS = all_commands()
PYTHONS = {"python", "python3", ".venv/bin/python"}
# programs outside this project: what each needs that a test cannot give it
EXTERNAL = {
    "curl": "talks to a running `verl serve` (tests/serve covers the endpoints)",
    "ray": "starts or inspects a Ray cluster of several machines",
    "git": "a checkout to compare against",
    "locust": "a load test by hand against a running server",
    "ls": "lists a directory the previous command wrote",
}
_PLACEHOLDER = re.compile(r"\.\.\.|<[^>]*>")


def _is_placeholder(word: str) -> bool:
    return bool(_PLACEHOLDER.search(word))


def _words(cmd: DocCommand, tmp: str) -> list[str]:
    """The command's arguments as a shell would pass them: ``~`` and ``$HOME`` expanded, ``/tmp/`` moved into the
    test's directory, placeholders dropped."""
    out: list[str] = []
    for word in cmd.argv:
        if _is_placeholder(word):
            if out and out[-1].startswith("-") and "=" not in out[-1]:  # `--config <your.yaml>`: the option goes too
                out.pop()
            continue
        word = os.path.expandvars(word.replace("~/", "$HOME/"))
        out.append(word.replace("/tmp/", tmp + "/"))
    return out


def _module_and_args(words: list[str]) -> tuple[str, list[str]] | None:
    """``python -m M args`` / ``verl SUB args`` -> ``(M, args)``."""
    from verl.cli import SUBCOMMANDS

    if words[0] in PYTHONS and len(words) > 2 and words[1] == "-m":
        return words[2], words[3:]
    if words[0] == "verl" and len(words) > 1 and words[1] in SUBCOMMANDS:
        return SUBCOMMANDS[words[1]].module, words[2:]
    return None


def _run_main(module: str, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``module.main(args)`` in this process, with ``env`` set; returns ``(exit code, stderr)``."""
    from verl.cli import resolve_main

    main = resolve_main(module)
    err = io.StringIO()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return int(code or 0), err.getvalue()


def _check_module_command(module: str, args: list[str], env: dict[str, str], where: str) -> None:
    from verl.cli import SUBCOMMANDS

    config_entries = {s.module for s in SUBCOMMANDS.values() if s.config_name} | {
        "verl.trainer.main_eval",
        "verl.trainer.fsdp_sft_trainer",
        "verl.experimental.one_step_off_policy.main_ppo",
        "verl.experimental.fully_async_policy.fully_async_main",
    }
    if module in config_entries:
        code, err = _run_main(module, [*args, "--cfg", "job"], env)
    else:  # a tool with its own options (serve, merge, report): they must parse
        code, err = _run_main(module, [*args, "--help"], env)
    assert code == 0, f"{where}: python -m {module} {shlex.join(args)} exited {code}:\n{err[-3000:]}"


def _script_of(words: list[str]) -> str | None:
    """The script a ``python script.py ...`` command runs (``None`` for a module, a snippet or another program)."""
    if words and words[0] == "nsys":
        words = words[next((i for i, w in enumerate(words) if w in PYTHONS), len(words)) :]
    if len(words) > 1 and words[0] in PYTHONS and words[1].endswith(".py"):
        return words[1]
    return None


@pytest.fixture(scope="module")
def script_helps(request: pytest.FixtureRequest, run_ahead, tmp_path_factory):
    """``python <script> --help`` of every script the selected commands run, started ahead two at a time (a fresh
    interpreter each, the slow part of this module); keyed by script path."""
    tmp = str(tmp_path_factory.mktemp("helps"))
    scripts = dict.fromkeys(
        script for cmd in run_ahead.selected(request, "cmd") if (script := _script_of(_words(cmd, tmp)))
    )
    commands = {
        script: dict(args=[sys.executable, os.path.join(ROOT, script), "--help"], timeout=180, cwd=ROOT)
        for script in scripts
        if os.path.isfile(os.path.join(ROOT, script))
    }
    runs = run_ahead.start(commands)
    yield runs
    runs.close()


def _check_script(words: list[str], where: str, helps) -> None:
    script = words[1]
    assert os.path.isfile(os.path.join(ROOT, script)), f"{where}: no such file {script}"
    out = helps.result(script)
    assert out.returncode == 0, f"{script} --help exited {out.returncode}:\n{out.stderr[-2000:]}"
    for word in words[2:]:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert re.search(rf"{re.escape(flag)}\b", out.stdout), f"{where}: {script} has no option {flag}"


def _stub_dir(tmp: str) -> str:
    """A directory with ``python``, ``python3`` and ``torchrun`` that append their argv to ``calls.jsonl``."""
    bin_dir = os.path.join(tmp, "stub-bin")
    os.makedirs(bin_dir, exist_ok=True)
    record = os.path.join(tmp, "calls.jsonl")
    for name in ("python", "python3", "torchrun"):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write(
                f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; "
                f'open("{record}", "a").write(json.dumps(sys.argv[1:]) + "\\n")\' "$@"\n'
            )
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return bin_dir


def _check_launch_script(cmd: DocCommand, words: list[str], tmp: str, where: str) -> None:
    script = words[1]
    assert os.path.isfile(os.path.join(ROOT, script)), f"{where}: no such file {script}"
    env = dict(os.environ, **cmd.env, HOME=tmp, PATH=_stub_dir(tmp) + os.pathsep + os.environ["PATH"])
    out = subprocess.run(["bash", *words[1:]], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{where}: {script} exited {out.returncode}:\n{out.stderr[-2000:]}"
    record = os.path.join(tmp, "calls.jsonl")
    calls = [json.loads(line) for line in open(record)] if os.path.exists(record) else []
    assert calls, f"{where}: {script} ran no python command"
    for argv in calls:
        if argv[:1] == ["-m"]:
            _check_module_command(argv[1], argv[2:], {}, f"{where} ({script})")
        elif argv and argv[0].endswith(".py"):  # a helper script the launch script runs on its own outputs
            assert os.path.isfile(os.path.join(ROOT, argv[0])), f"{where}: {script} runs a missing {argv[0]}"


def _check_make(target: str, where: str) -> None:
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{where}: make {target}: {out.stderr.strip()}"


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_command_runs(cmd: DocCommand, tmp_path, script_helps) -> None:
    tmp, where = str(tmp_path), f"{cmd.id}: {cmd.text[:120]}"
    words = _words(cmd, tmp)
    assert words, f"{where}: nothing to run"
    program = words[0]
    if program == "nsys":  # `nsys profile <options> python3 ...` (docs/profiling.md): the wrapped command is checked
        words = words[next(i for i, w in enumerate(words) if w in PYTHONS) :]
        program = words[0]
    if program in EXTERNAL:
        pytest.skip(f"{program}: {EXTERNAL[program]}")
    if program in (".", "source"):  # entering the environment `make` set up
        env_dir = os.path.dirname(os.path.dirname(os.path.join(ROOT, words[1])))
        if os.path.realpath(sys.prefix) != os.path.realpath(env_dir):
            pytest.skip(f"the suite runs in {sys.prefix}, not in the environment `make` sets up ({env_dir})")
        assert os.path.isfile(os.path.join(ROOT, words[1])), f"{where}: no {words[1]} (run make demo or make test)"
        return
    if program == "make":
        _check_make(words[1], where)
        return
    if program == "bash":
        _check_launch_script(cmd, words, tmp, where)
        return
    module = _module_and_args(words)
    if module is not None:
        _check_module_command(module[0], module[1], cmd.env, where)
        return
    if program == "verl":
        from verl.cli import main

        with contextlib.redirect_stdout(io.StringIO()):
            assert main(words[1:]) == 0, where
        return
    assert program in PYTHONS, f"{where}: unknown program {program!r} (add it to EXTERNAL with the reason)"
    if words[1:2] == ["-c"] or words[1:2] == ["-"]:  # a snippet: run it for real
        code = words[2] if words[1] == "-c" else cmd.heredoc.replace("/tmp/", tmp + "/")
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{where}:\n{out.stderr[-2000:]}"
        return
    _check_script(words, where, script_helps)


def test_readme_says_how_the_environment_is_entered() -> None:
    text = open(os.path.join(ROOT, "README.md")).read()
    assert ". .venv/bin/activate" in text or "source .venv/bin/activate" in text
