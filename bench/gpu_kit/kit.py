"""The GPU session kit's stages: what runs on a lent GPU machine, in which order, under which time limits.

A project session is lent a GPU only by chance, for 15 minutes of device time (start-up included) and at most 10
minutes a command. This module holds the prepared plan for issue 33's figures, so such a session spends its device
time measuring instead of improvising. ``bench/gpu_kit/run.sh`` installs the carried wheels and calls
``python bench/gpu_kit/kit.py run ...``; each stage's commands run under ``timeout`` with the stage's limit and a
global deadline (a stage that cannot finish before the deadline is skipped, and the log says so). Every command's
output goes to ONE log file in ``$OUT`` (``kit.log``); every result file a command writes (``bench/results/*.json``,
the stage's own folder) goes into ONE bundle (``bundle.json``, rewritten after each command), and the result tables
into ``summary.md``: three files, so a timeout or crash still returns what finished.

    python bench/gpu_kit/kit.py plan [part1 part2 ...]         # the stages with their limits and estimates
    python bench/gpu_kit/kit.py run part1 --out DIR            # (through run.sh) run the stages of part1
    python bench/gpu_kit/kit.py run --smoke all --out DIR      # the CPU dry run: tiny shapes, CUDA stages skipped
    python bench/gpu_kit/kit.py unpack DIR/bundle.json         # the bundle's result files into bench/results/gpu/

The CPU dry run proves the wheel list complete: a fresh venv with only what the GPU image has (its packages are
listed in bench/gpu_kit/image_packages.txt; pip may pull pydantic in through typer: uninstall it), the kit's wheels
for that venv's Python, then every stage on tiny shapes (CUDA-only stages say "skipped: no CUDA"):

    python3 -m venv /tmp/kitvenv && /tmp/kitvenv/bin/pip install torch transformers==5.17.0 accelerate peft pyarrow \
        pandas numpy safetensors huggingface_hub tensorboard prometheus-client matplotlib cloudpickle fsspec pyyaml \
        requests tqdm jinja2 pytest pytest-timeout xxhash aiohttp httpx sympy psutil
    /tmp/kitvenv/bin/pip uninstall -y pydantic pydantic-core annotated-types typing-inspection
    bash bench/gpu_kit/prepare.sh --python-version 3.11 --wheels .gpu_kit/wheels-cp311
    OUT=/tmp/kit_dry bash bench/gpu_kit/run.sh --smoke --python /tmp/kitvenv/bin/python \
        --wheels .gpu_kit/wheels-cp311 --site /tmp/kitsite          # about 75 s on 2 cores

Estimates are seconds on an H100/H200 from the first H200 run of this kit (docs/benchmarks.md section 8: each
stage's seconds are in its kit.log; our GRPO step 1.3 s at 0.5B and 2.0 s at 1.5B, TRL 8.3 s (0.5B, checkpointing
off); decode 2.6 ms a step with CUDA graphs and 10-19 ms eager at 0.5B; ``torch.compile``'s first call about a
minute per shape) plus process start-up,
model building and warm-up; the limit of each stage is its kill bound, and each part's limits together fit its
budget (part1: 8 minutes, part2: 5, install included), so two calls fit one session's 15 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT_DIR = Path(__file__).resolve().parent
RESULTS = ROOT / "bench" / "results"
TOKENIZER = ".gpu_kit/tokenizer"  # written by prepare.sh: the bundled SmolLM2 tokenizer (+ its config.json)
STATE_DIR = "/tmp/gpu_kit_state"  # per stage copies of its results; kept while the machine stays warm
SMOKE_SLOWER = 10  # the dry run's limits: this many times the GPU's (CPU cores are slower, and may be shared)
MIN_COMMAND_S = 5  # a command with less time than this left (of its stage or the deadline) is not started
INSTALL_S = 10  # installing the wheels into /tmp/site (counted in each part's budget)
# seconds per part, install included; part3 runs only in what a session has left after part1 and part2
BUDGETS = {"part1": 480, "part2": 300, "part3": 270}

# Every test that runs only on CUDA, found with
#   grep -rln "skipif(not torch.cuda.is_available()" tests/     (the skip marks; tests/bench/test_gpu_kit.py keeps
# this list equal to that grep) plus the one test that takes the CUDA branch when a GPU is there
# (tests/test_protocol.py::test_to_device_returns_self). The two whole files are run: their CPU tests are seconds.
CUDA_TEST_FILES = (
    "tests/utils/test_device_cuda.py",
    "tests/utils/test_fsdp_single_rank.py",
    "tests/workers/rollout/decode/test_decode_modes.py",
    "tests/hardware/test_precision.py",
    "tests/utils/test_logprob_kernels.py",
    "tests/workers/actor/test_response_forward.py",
)
CUDA_TESTS = (
    "tests/utils/test_device_cuda.py",
    "tests/utils/test_fsdp_single_rank.py",
    "tests/workers/rollout/decode/test_decode_modes.py",
    "tests/hardware/test_precision.py::test_cuda_auto_follows_bf16_support",
    "tests/test_protocol.py::test_to_device_returns_self",
    "tests/utils/test_logprob_kernels.py::test_compiled_kernels_give_the_eager_values_and_gradients_on_cuda",
    "tests/workers/actor/test_response_forward.py::test_packed_rows_give_the_padded_values_on_cuda",
)
# --maxfail 3 rather than -x: one failing test should not hide the others on a GPU we may not see again soon
PYTEST = "{py} -m pytest -q -p no:cacheprovider --timeout 300 --maxfail 3 -rfEs --junitxml {dir}/cuda_tests.xml "
# a CPU-only test of the files above that compiles with inductor's C++ backend (~20 s; CI runs it)
DESELECT = "--deselect tests/workers/rollout/decode/test_decode_modes.py::test_inductor_compiled_step_matches_eager "
GRPO = "{py} bench/gpu_grpo_vs_trl.py --tokenizer {tok} "
# FSDP2's CPUOffloadPolicy on one GPU (parameters, gradients and the AdamW step in CPU memory): param_offload /
# optimizer_offload alone bring the Adam state back to the GPU for the step (fp32 7B: ~110 GB with the gradients)
OFFLOAD_7B = (
    "--verl-override actor_rollout_ref.actor.fsdp_config.offload_policy=true "
    "--verl-override actor_rollout_ref.model.enable_gradient_checkpointing=true "
    "--verl-override actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="
)
# the update uncompiled: since the first H200 run actor.use_torch_compile is on by default on CUDA, so the grpo
# stage's rows are the compiled ones and this is the other side of that A/B
NO_COMPILE = "--verl-override actor_rollout_ref.actor.use_torch_compile=false "
EAGER_UPDATE = NO_COMPILE + "--tag eager-update"
# the memory target's configuration: upstream's default gradient checkpointing (TRL's default too)
CHECKPOINTED = "--verl-override actor_rollout_ref.model.enable_gradient_checkpointing=true --tag ckpt"
# with the chunked LM head too: one 128-sequence micro-batch of 1.5B holds [41k, 151936] bf16 logits and their
# gradient (25 GB) beside 25 GB of fp32 weights, gradients and Adam state; checkpointing alone cannot reach 50 GB
CHECKPOINTED_FUSED = (
    "--verl-override actor_rollout_ref.model.enable_gradient_checkpointing=true "
    "--verl-override actor_rollout_ref.model.use_fused_kernels=true --tag ckpt-fused"
)
# the merged ours-vs-TRL table: ours from this machine's grpo stage (kept in STATE_DIR), TRL from this stage
MERGE = (
    "{py} bench/gpu_grpo_vs_trl.py --merge $(ls {state}/grpo/*gpu_grpo_vs_trl_*.json "
    "{results}/gpu_grpo_vs_trl_trl-o*_*.json 2>/dev/null) --tag vs-trl{smoke_flag}"
)


@dataclass(frozen=True)
class Stage:
    """One stage: shell commands run in order, each under what is left of the stage's ``limit_s``."""

    name: str
    part: str
    limit_s: int  # kill bound of the whole stage
    estimate_s: int  # expected seconds on an H100/H200; a stage with less than this left is skipped
    commands: tuple[str, ...]
    smoke: tuple[str, ...] | None  # the CPU dry run's commands; None: the stage needs CUDA ("skipped: no CUDA")
    note: str


STAGES: tuple[Stage, ...] = (
    Stage("env", "part1", 30, 15,
          ("{py} bench/gpu_kit/env_check.py --out {dir}",),
          ("{py} bench/gpu_kit/env_check.py --out {dir}",),
          "nvidia-smi, versions, where each carried package was imported from, verl's config, the bench modules"),
    Stage("cuda_tests", "part1", 100, 75,
          (PYTEST + DESELECT + " ".join(CUDA_TESTS),),
          (PYTEST + DESELECT + " ".join(CUDA_TESTS),),
          "every CUDA-only test (the list above; compile_cuda_graph's compiles a tiny model, ~20 s, and the "
          "offload_policy update runs in a child process); on CPU they skip themselves"),
    Stage("grpo", "part1", 100, 80,
          (GRPO + "--sides verl --shapes 0.5B 1.5B --warmup 1 --steps 2",),
          (GRPO + "--smoke --sides verl",),
          "ours, default config (the update compiled on CUDA), 16x8 x 256 tokens; 1 warm-up step (it compiles) + "
          "2 timed steps"),
    Stage("grpo_eager", "part1", 60, 45,
          (GRPO + "--sides verl --shapes 0.5B --warmup 1 --steps 2 " + EAGER_UPDATE,),
          (GRPO + "--smoke --sides verl " + EAGER_UPDATE,),
          "the other side of the use_torch_compile A/B at 0.5B (1.5B's uncompiled update does not fit 139 GB "
          "with one 128-sequence micro-batch)"),
    Stage("decode", "part1", 80, 60,
          ("{py} bench/decode_speed.py --shapes 1.5B --modes eager cuda_graph {weights_decode} --repeats 1",),
          ("{py} bench/decode_speed.py --smoke",),
          "1.5B, 128 rows, 64+256 tokens, the default graph mode (stacked weight copy) against eager; 0.5B was "
          "measured on the first H200 run (modules 4.91, copy 2.62 ms/step)"),
    Stage("decode_compile", "part1", 90, 75,
          ("{py} bench/decode_speed.py --shapes 0.5B --modes cuda_graph {compile_mode} {weights_decode} "
           "{windows_ab} --repeats 1",),
          None,
          "compile_cuda_graph (the compiled forward, the sampler uncompiled) against cuda_graph at 0.5B; about "
          "a minute of compilation. cuda_graph's row is the 2.5 ms target's: 2.62 ms/step on the first run, "
          "before the rotary embedding and the cache write lost 3 kernels a layer and attention read only its "
          "window (the windows=1 row: the whole cache, as on the first run)"),
    Stage("mem7b", "part2", 150, 130,
          (GRPO + "--sides verl --shapes 7B --batch 4 --group 8 --warmup 0 --steps 1 --memory-cap-gb 79 "
           "--tag 7b-offload " + NO_COMPILE + OFFLOAD_7B + "8",),
          (GRPO + "--smoke --sides verl --memory-cap-gb 79 --tag 7b-offload " + OFFLOAD_7B + "2",),
          "a Qwen2.5-7B-shaped step under a 79 GiB cap (an H100 80GB's memory) with FSDP2's CPU offload "
          "(fsdp_config.offload_policy, one GPU) and gradient checkpointing; 4 prompts x 8 responses, "
          "micro-batch 8, one step: did it run, its peak. The first H200 run reached the update in 110 s (it "
          "failed there: fixed since); the layers stay uncompiled so the compilation does not take the stage's "
          "time"),
    Stage("trl", "part2", 130, 115,
          (GRPO + "--sides trl-ckpt-off --shapes 0.5B --warmup 1 --steps 1 --tag trl-off",
           GRPO + "--sides trl-ckpt-on --shapes 1.5B --warmup 1 --steps 1 --tag trl-on",
           MERGE),
          (GRPO + "--smoke --sides trl-ckpt-off --tag trl-off", MERGE),
          "TRL at 0.5B (checkpointing off, 56 s on the first H200 run) and 1.5B (on; off ran out of memory at "
          "139 GB; 43 s was not enough), 1 warm-up + 1 timed step; merged with ours from the grpo stage on the "
          "same GPU (UUID checked) into one table with ratios"),
    Stage("grpo_ckpt", "part3", 70, 55,
          (GRPO + "--sides verl --shapes 1.5B --warmup 1 --steps 2 " + CHECKPOINTED,),
          (GRPO + "--smoke --sides verl " + CHECKPOINTED,),
          "ours at 1.5B with gradient checkpointing (upstream's and TRL's default): against TRL's 1.5B row (its "
          "default, checkpointing on) and the grpo stage's (speed lost to the recomputation)"),
    Stage("grpo_mem", "part3", 70, 55,
          (GRPO + "--sides verl --shapes 1.5B --warmup 1 --steps 2 " + CHECKPOINTED_FUSED,),
          (GRPO + "--smoke --sides verl " + CHECKPOINTED_FUSED,),
          "the memory target's configuration at 1.5B: checkpointing and use_fused_kernels (no [tokens, vocab] "
          "logits): its peak against 50 GB, and the fused head's speed against grpo_ckpt"),
    Stage("logprob_head", "part3", 15, 10,
          ("{py} bench/logprob_memory.py --device cuda --head --tokens 16384 --vocab 151936 --hidden 896",),
          ("{py} bench/logprob_memory.py --smoke --head",),
          "the LM head and log-probs alone, forward + backward: naive, chunked (eager kernels), chunked with the "
          "compiled kernels (use_torch_compile's), fused (use_fused_kernels); first H200 run: 0.050 / 0.078 / - "
          "/ 0.107 s"),
    Stage("profile", "part3", 50, 45,
          ("{py} bench/gpu_kit/profile_step.py --shape 0.5B --tokenizer {tok} --out {dir}",),
          ("{py} bench/gpu_kit/profile_step.py --smoke --tokenizer {tok} --out {dir}",),
          "torch.profiler: top 30 CUDA kernels of one decode step (eager, cuda_graph) and one actor update "
          "micro-batch (and the old-log-prob pass) at 0.5B"),
    Stage("decode_long", "part3", 30, 20,
          ("{py} bench/decode_speed.py --shapes 0.5B --modes cuda_graph {weights_decode} --response-length 1024 "
           "{windows_ab} --repeats 1",),
          None,
          "a 1,024-token response at 0.5B in cuda_graph mode: attention windows (8 per cache) against the whole "
          "cache (1), where attention reads more bytes a step than the weights"),
    Stage("packing", "part3", 25, 20,
          ("{py} bench/packing.py --device cuda --shape 0.5B --rows 16 --micro-batch 8 --prompt-length 128 "
           "--response-length 512 --repeats 2",),
          ("{py} bench/packing.py --smoke",),
          "the actor side of a GRPO step (uncompiled) with padded micro-batches against packed rows "
          "(use_remove_padding's default since the grpo stage's previous figures), responses of 64-512 tokens"),
)  # fmt: skip
PARTS = tuple(dict.fromkeys(s.part for s in STAGES))


def select(names: list[str]) -> list[Stage]:
    """The stages named (a stage, a part, or ``all``), in the table's order (priority), each once."""
    known = {s.name for s in STAGES}
    for name in names:
        if name not in known and name not in PARTS and name != "all":
            raise SystemExit(f"unknown stage or part {name!r}; stages: {sorted(known)}, parts: {list(PARTS)}, all")
    wanted = set(names) if names else {"all"}
    return [s for s in STAGES if "all" in wanted or s.name in wanted or s.part in wanted]


def budget_of(stages: list[Stage]) -> int:
    """The default deadline: the budgets of the parts the stages belong to."""
    return sum(BUDGETS[p] for p in dict.fromkeys(s.part for s in stages))


def decode_options() -> dict[str, str]:
    """The decode bench's options this checkout has (the A/B of ``--weights`` and the ``compile_cuda_graph``
    mode arrive with the decode-loop work): read from the sources, so an older checkout runs without them."""
    bench = (ROOT / "bench" / "decode_speed.py").read_text()
    loop = ROOT / "verl" / "workers" / "rollout" / "decode" / "loop.py"
    has_weights = '"--weights"' in bench
    has_compile_graph = loop.exists() and "compile_cuda_graph" in loop.read_text()
    has_windows = '"--attention-windows"' in bench
    return {
        "weights_ab": "--weights module decode" if has_weights else "",
        "weights_decode": "--weights decode" if has_weights else "",
        "compile_mode": "compile_cuda_graph" if has_compile_graph else "compile",
        "windows_ab": "--attention-windows 8 1" if has_windows else "",
    }


def plan_text(stages: list[Stage]) -> str:
    """The stages with their limits and estimates, and each part's sum against its budget."""
    lines = [f"{'stage':<15}{'part':<7}{'limit s':>8}{'est. s':>8}  what"]
    for s in stages:
        lines.append(f"{s.name:<15}{s.part:<7}{s.limit_s:>8}{s.estimate_s:>8}  {s.note}")
    for part in dict.fromkeys(s.part for s in stages):
        mine = [s for s in STAGES if s.part == part]
        limits = INSTALL_S + sum(s.limit_s for s in mine)
        estimate = INSTALL_S + sum(s.estimate_s for s in mine)
        fits = "fits" if limits <= BUDGETS[part] else "OVER"
        lines.append(f"{part}: limits sum to {limits} s, estimates to {estimate} s (install {INSTALL_S} s included); "
                     f"budget {BUDGETS[part]} s: {fits}")  # fmt: skip
    return "\n".join(lines)


class Runner:
    """Runs stages under their limits and the deadline; keeps the log, the bundle and the summary in ``out``."""

    def __init__(self, out: Path, deadline: float, smoke: bool, python: str, state: Path) -> None:
        self.out, self.deadline, self.smoke, self.python, self.state = out, deadline, smoke, python, state
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / "kit.log"
        self.bundle_path = out / "bundle.json"
        self.bundle: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "smoke": smoke}
        self.bundle["stages"] = {}
        self.results_dir = RESULTS / "smoke" if smoke else RESULTS
        import torch  # after the wheels' install: what this Python sees

        self.cuda = torch.cuda.is_available()

    def say(self, line: str) -> None:
        """A line to stdout (the tool's output tail) and to the log."""
        stamp = time.strftime("%H:%M:%S")
        print(f"[kit {stamp}] {line}", flush=True)
        with open(self.log_path, "a") as log:
            log.write(f"[kit {stamp}] {line}\n")

    def _save(self) -> None:
        tmp = self.bundle_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.bundle, indent=1, default=str))
        os.replace(tmp, self.bundle_path)

    def _snapshot(self, folders: list[Path]) -> dict[Path, float]:
        return {p: p.stat().st_mtime for f in folders if f.exists() for p in f.iterdir() if p.is_file()}

    def _collect(self, before: dict[Path, float], folders: list[Path], entry: dict, index: int, sdir: Path) -> None:
        """Files the command wrote or rewrote: JSON parsed into the bundle, text as text; copies in ``sdir``."""
        for path, mtime in self._snapshot(folders).items():
            if before.get(path) == mtime or path.suffix not in (".json", ".txt", ".xml", ".md"):
                continue
            key = f"{index}_{path.name}" if path.parent != sdir else path.name
            text = path.read_text(errors="replace")
            try:
                entry["files"][key] = json.loads(text) if path.suffix == ".json" else text
            except json.JSONDecodeError:
                entry["files"][key] = text
            if path.parent != sdir:
                shutil.copy(path, sdir / key)

    def run_stage(self, stage: Stage, fields: dict[str, str]) -> None:
        entry: dict = {"part": stage.part, "limit_s": stage.limit_s, "estimate_s": stage.estimate_s, "commands": []}
        entry["files"] = {}
        self.bundle["stages"][stage.name] = entry
        commands = stage.smoke if self.smoke else stage.commands
        left = self.deadline - time.time()
        if commands is None or (not self.cuda and not self.smoke):
            entry["status"] = "skipped: no CUDA"
        elif left < (stage.estimate_s if not self.smoke else 1):
            entry["status"] = (
                f"skipped: needs about {stage.estimate_s} s, {max(0, left):.0f} s left before the deadline"
            )
        if "status" in entry:
            self.say(f"{stage.name}: {entry['status']}")
            self._save()
            return
        sdir = self.state / stage.name
        shutil.rmtree(sdir, ignore_errors=True)
        sdir.mkdir(parents=True)
        folders = [self.results_dir, sdir]
        start = time.time()
        statuses = []
        stage_limit = stage.limit_s * (SMOKE_SLOWER if self.smoke else 1)
        for index, template in enumerate(commands):
            cmd = template.format(dir=sdir, **fields)
            limit = min(stage_limit - (time.time() - start), self.deadline - time.time())
            if limit < MIN_COMMAND_S:
                statuses.append(f"command {index}: skipped, no time left")
                self.say(f"{stage.name}: command {index} skipped: {limit:.0f} s left of the stage or the deadline")
                break
            self.say(f"{stage.name} [{index}] (limit {limit:.0f} s): {cmd}")
            before = self._snapshot(folders)
            t0 = time.time()
            with open(self.log_path, "a") as log:
                rc = subprocess.call(["timeout", "-k", "10", f"{int(limit)}", "bash", "-c", cmd], cwd=ROOT,
                                     stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
            seconds = time.time() - t0
            status = "ok" if rc == 0 else f"timed out after {seconds:.0f} s" if rc in (124, 137) else f"exit {rc}"
            statuses.append(status)
            entry["commands"].append({"command": cmd, "status": status, "seconds": round(seconds, 1)})
            self._collect(before, folders, entry, index, sdir)
            self.say(f"{stage.name} [{index}]: {status} in {seconds:.0f} s")
            self._save()
        entry["seconds"] = round(time.time() - start, 1)
        entry["status"] = "ok" if all(s == "ok" for s in statuses) else "; ".join(statuses)
        self.say(f"{stage.name}: {entry['status']} ({entry['seconds']:.0f} s of {stage_limit})")
        self._save()

    def summary(self) -> str:
        """Each stage's status and every result table, as Markdown (also written to ``summary.md``)."""
        lines = [f"# GPU kit summary ({self.bundle['started']}{', smoke' if self.smoke else ''})", ""]
        for name, entry in self.bundle["stages"].items():
            lines.append(
                f"- **{name}**: {entry['status']}" + (f" ({entry['seconds']} s)" if "seconds" in entry else "")
            )
        for name, entry in self.bundle["stages"].items():
            for key, value in entry["files"].items():
                if isinstance(value, dict) and isinstance(value.get("table"), str):
                    lines += ["", f"## {name}: {key}", "", value["table"]]
                elif isinstance(value, dict) and isinstance(value.get("results"), list) and "decode_speed" in key:
                    lines += ["", f"## {name}: {key}", ""]
                    num = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
                    lines += [f"- {r.get('shape')} {r.get('mode')} {r.get('weights', '')}: {num(r.get('ms_per_step'))} "
                              f"ms/step (bandwidth limit {num(r.get('bandwidth_limit_ms'))}), first call "
                              f"{num(r.get('first_call_s'))} s, same tokens {r.get('same_tokens_as_first_mode')}"
                              for r in value["results"]]  # fmt: skip
        text = "\n".join(lines) + "\n"
        (self.out / "summary.md").write_text(text)
        return text


def run(args: argparse.Namespace) -> int:
    stages = select(args.stages)
    started = args.started_at or time.time()
    budget = args.budget_s or (3600 if args.smoke else budget_of(stages))
    out = Path(args.out or os.environ.get("OUT") or "/tmp/gpu_kit_out")
    state = Path(args.state or (STATE_DIR + ("_smoke" if args.smoke else "")))
    runner = Runner(out, started + budget, args.smoke, args.python or sys.executable, state)
    results = os.path.relpath(runner.results_dir, ROOT)
    smoke_flag = " --smoke" if args.smoke else ""
    fields = dict(decode_options(), py=runner.python, tok=args.tokenizer, state=state, results=results,
                  smoke_flag=smoke_flag)  # fmt: skip
    runner.bundle.update(budget_s=budget, cuda=runner.cuda, fields={k: str(v) for k, v in fields.items()})
    runner.say(f"stages {[s.name for s in stages]}, deadline in {started + budget - time.time():.0f} s, "
               f"CUDA: {runner.cuda}, smoke: {args.smoke}, decode options: {decode_options()}")  # fmt: skip
    if not Path(ROOT / args.tokenizer).is_dir():
        runner.say(f"no tokenizer folder at {args.tokenizer}: run bench/gpu_kit/prepare.sh first")
        return 2
    for stage in stages:
        runner.run_stage(stage, fields)
    print(runner.summary(), flush=True)
    return 0


def unpack(bundle_file: str, into: str) -> None:
    """Write the bundle's files (result JSON, profile text, test report) into ``into``/<stage>__<name>."""
    bundle = json.loads(Path(bundle_file).read_text())
    target = Path(into)
    target.mkdir(parents=True, exist_ok=True)
    for stage, entry in bundle["stages"].items():
        print(f"{stage}: {entry['status']}")
        for key, value in entry["files"].items():
            path = target / f"{stage}__{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}"
            path.write_text(json.dumps(value, indent=2) + "\n" if not isinstance(value, str) else value)
            print(f"  {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    plan = sub.add_parser("plan", help="print the stages, their limits and estimates, and the parts' budgets")
    plan.add_argument("stages", nargs="*")
    runp = sub.add_parser("run", help="run stages (through run.sh on the GPU machine)")
    runp.add_argument("stages", nargs="*", help="stages or parts (part1, part2, part3, all); default all")
    runp.add_argument("--smoke", action="store_true", help="the CPU dry run: tiny shapes; CUDA stages skipped")
    runp.add_argument("--out", default=None, help="where the log, bundle and summary go (default $OUT)")
    runp.add_argument("--budget-s", type=float, default=None, help="deadline in seconds after --started-at")
    runp.add_argument("--started-at", type=float, default=None, help="epoch seconds run.sh started (install)")
    runp.add_argument("--python", default=None)
    runp.add_argument("--state", default=None)
    runp.add_argument("--tokenizer", default=TOKENIZER)
    unp = sub.add_parser("unpack", help="write a bundle's files into bench/results/gpu/")
    unp.add_argument("bundle")
    unp.add_argument("--into", default=str(RESULTS / "gpu"))
    args = parser.parse_args(argv)
    if args.verb == "plan":
        print(plan_text(select(args.stages)))
        return 0
    if args.verb == "unpack":
        unpack(args.bundle, args.into)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
