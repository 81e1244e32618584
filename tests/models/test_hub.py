"""Models from the hub (verl.models.hub) against a fake Hugging Face hub on 127.0.0.1: download, file selection,
revisions, the cache, gated and missing repos, and the one-line errors of the entry points. No real network."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from verl.models import hub
from verl.models.hub import HubId, ModelPathError, parse_hub_id, select_model_files
from verl.trainer import run_paths
from verl.trainer.config.validation import ConfigError

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ fake hub
class FakeHub:
    """Serves the endpoints ``snapshot_download`` / ``HfApi.model_info`` use, the way huggingface.co answers them.

    - ``GET /api/models/{repo}/revision/{rev}``: ``{"id", "sha", "siblings": [{"rfilename", "size"}]}``;
    - ``GET /api/models/{repo}/tree/{rev}``: ``[{"type": "file", "path", "size", "oid"}]``;
    - ``HEAD|GET /{repo}/resolve/{rev}/{file}``: ``ETag``, ``X-Repo-Commit`` and ``Content-Length`` headers
      (huggingface_hub's ``get_hf_file_metadata`` refuses a response without them), then the bytes.

    Errors carry huggingface.co's ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``,
    ``EntryNotFound``), from which huggingface_hub picks its exception class.
    """

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, tuple[str, dict[str, bytes]]]] = {}  # repo -> rev -> (commit, files)
        self.gated: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        hub_self = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub_self._handle(self, head=True)

            def do_GET(self):
                hub_self._handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, repo: str, files: dict[str, bytes], revision: str = "main") -> str:
        commit = hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
        self.repos.setdefault(repo, {})[revision] = (commit, files)
        return commit

    def _lookup(self, repo: str, rev: str) -> tuple[str, dict[str, bytes]] | None:
        for name, (commit, files) in self.repos.get(repo, {}).items():
            if rev in (name, commit):
                return commit, files
        return None

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes, head: bool, **headers: str) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k.replace("_", "-"), v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, head: bool) -> None:
        self._send(h, status, json.dumps({"error": code}).encode(), head, X_Error_Code=code)

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append((h.command, path))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            repo, rest = "/".join(parts[2:4]), parts[4:]
            kind, rev = (rest[0], "/".join(rest[1:])) if rest else ("revision", "main")
            api = True
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo, kind, rev, file = "/".join(parts[:2]), "resolve", parts[3], "/".join(parts[4:])
            api = False
        else:
            return self._error(h, 404, "EntryNotFound", head)
        if repo in self.gated:
            return self._error(h, 401, "GatedRepo", head)
        if repo not in self.repos:
            return self._error(h, 401, "RepoNotFound", head)  # the hub answers 401 for missing and private alike
        found = self._lookup(repo, rev)
        if found is None:
            return self._error(h, 404, "RevisionNotFound", head)
        commit, files = found
        if api and kind == "revision":
            siblings = [{"rfilename": f, "size": len(b)} for f, b in files.items()]
            body = json.dumps({"id": repo, "modelId": repo, "sha": commit, "siblings": siblings}).encode()
            return self._send(h, 200, body, head, Content_Type="application/json")
        if api and kind == "tree":
            tree = [
                {"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for f, b in files.items()
            ]
            return self._send(h, 200, json.dumps(tree).encode(), head, Content_Type="application/json")
        if kind == "resolve" and file in files:
            data = files[file]
            etag = f'"{hashlib.sha1(data).hexdigest()}"'
            return self._send(h, 200, data, head, ETag=etag, X_Repo_Commit=commit)
        return self._error(h, 404, "EntryNotFound", head)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def tiny_repo_files(model_dir: str) -> dict[str, bytes]:
    """The files of the tiny test model, plus what a real repo also holds and a download must skip."""
    files = {name: (Path(model_dir) / name).read_bytes() for name in os.listdir(model_dir)}
    files.update(
        {
            "pytorch_model.bin": b"legacy weights that must not be downloaded",
            "tf_model.h5": b"tf",
            "flax_model.msgpack": b"flax",
            "onnx/model.onnx": b"onnx",
            "original/consolidated.pth": b"pth",
            "README.md": b"# tiny",
            ".gitattributes": b"*.safetensors filter=lfs",
        }
    )
    return files


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A running fake hub that huggingface_hub in this process talks to, with an empty cache under tmp_path."""
    from huggingface_hub import constants

    with FakeHub() as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


# ------------------------------------------------------------------------------------------------ pure parts
@pytest.mark.parametrize(
    "value, expected",
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", HubId("Qwen/Qwen2.5-0.5B-Instruct")),
        ("org/name@v1.0", HubId("org/name", "v1.0")),
        ("org/name@refs/pr/3", HubId("org/name", "refs/pr/3")),
        ("/abs/org/name", None),
        ("./org/name", None),
        ("~/models/x", None),
        ("a/b/c", None),
        ("single", None),
        ("org/name@", None),
        ("org/-bad", None),
        ("org/na--me", None),
    ],
)
def test_parse_hub_id(value, expected):
    assert parse_hub_id(value) == expected


def test_file_selection_prefers_safetensors_and_skips_other_formats():
    files = [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
        "merges.txt", "vocab.json", "chat_template.jinja", "tokenizer.model", "qwen.tiktoken", "modeling_x.py",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
        "consolidated.safetensors", "pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
        "flax_model.msgpack", "model.onnx", "onnx/model.onnx", "original/consolidated.00.pth", "README.md",
        ".gitattributes", "training_args.bin", "additional_chat_templates/tool.jinja", "model.gguf",
    ]  # fmt: skip
    assert select_model_files(files) == sorted(
        [
            "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "merges.txt", "vocab.json", "chat_template.jinja", "tokenizer.model",
            "qwen.tiktoken", "modeling_x.py", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
            "model.safetensors.index.json", "additional_chat_templates/tool.jinja",
        ]
    )  # fmt: skip
    # no safetensors: the PyTorch weights (and their index) are the ones to take
    legacy = ["config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
              "pytorch_model.bin.index.json", "tf_model.h5", "training_args.bin"]  # fmt: skip
    assert select_model_files(legacy) == sorted(legacy[:4])


# ------------------------------------------------------------------------------------------------ fake hub, in process
def test_download_fetches_only_what_a_model_needs_and_loads(fake_hub, tiny_model_dir, capsys):
    from verl.models.loader import load_causal_lm, load_tokenizer, resolve_model_path

    commit = fake_hub.add("tiny-org/tiny-llama", tiny_repo_files(tiny_model_dir))
    path = resolve_model_path("tiny-org/tiny-llama")
    assert Path(path).name == commit and "models--tiny-org--tiny-llama" in path
    assert sorted(os.listdir(path)) == sorted(os.listdir(tiny_model_dir))  # nothing else came down
    fetched = {p.rsplit("/", 1)[-1] for m, p in fake_hub.requests if m == "GET" and "/resolve/" in p}
    assert fetched == set(os.listdir(tiny_model_dir))
    assert "downloading model 'tiny-org/tiny-llama'" in capsys.readouterr().err
    model = load_causal_lm("tiny-org/tiny-llama")
    assert load_tokenizer("tiny-org/tiny-llama").pad_token_id is not None
    assert model.config.vocab_size > 0

    # the second resolution is served by the cache without a single request (what the workers see)
    before = len(fake_hub.requests)
    assert resolve_model_path("tiny-org/tiny-llama") == path
    assert len(fake_hub.requests) == before


def test_revision_is_downloaded_and_cached_separately(fake_hub, tiny_model_dir):
    from verl.models.loader import resolve_model_path

    files = tiny_repo_files(tiny_model_dir)
    main_commit = fake_hub.add("tiny-org/rev", files)
    v1_commit = fake_hub.add("tiny-org/rev", {**files, "generation_config.json": b'{"max_length": 7}'}, "v1")
    assert Path(resolve_model_path("tiny-org/rev@v1")).name == v1_commit
    assert Path(resolve_model_path("tiny-org/rev")).name == main_commit
    assert json.loads((Path(resolve_model_path("tiny-org/rev@v1")) / "generation_config.json").read_text()) == {
        "max_length": 7
    }
    with pytest.raises(ModelPathError, match=r"tiny-org/rev@nope.*has no revision 'nope'"):
        resolve_model_path("tiny-org/rev@nope")


@pytest.mark.parametrize(
    "setup, expected",
    [
        ("missing", r"no such repository, or it is private and HF_TOKEN is not set"),
        ("gated", r"gated and HF_TOKEN is not set.*accept its terms"),
        ("no_config", r"has no config.json"),
    ],
)
def test_unobtainable_models_fail_in_one_line(fake_hub, setup, expected):
    from verl.models.loader import resolve_model_path

    if setup == "gated":
        fake_hub.gated.add("tiny-org/x")
    if setup == "no_config":
        fake_hub.add("tiny-org/x", {"adapter_config.json": b"{}", "adapter_model.safetensors": b"x"})
    with pytest.raises(ModelPathError, match=expected) as info:
        resolve_model_path("tiny-org/x")
    assert "\n" not in str(info.value) and isinstance(info.value, ConfigError)


def test_unreachable_hub_fails_in_one_line(tmp_path, monkeypatch):
    import socket

    from huggingface_hub import constants

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ModelPathError, match=r"could not be downloaded \(cannot reach http://127.0.0.1") as info:
        hub.resolve_hub_model(HubId("tiny-org/x"))
    assert "\n" not in str(info.value) and "hf download tiny-org/x" in str(info.value)


def test_concurrent_resolvers_download_once(fake_hub, tiny_model_dir):
    fake_hub.add("tiny-org/race", tiny_repo_files(tiny_model_dir))
    results: list[str] = []
    barrier = threading.Barrier(3)

    def resolve():
        barrier.wait()
        results.append(hub.resolve_hub_model(HubId("tiny-org/race")))

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 3
    listings = [p for m, p in fake_hub.requests if p.startswith("/api/models/tiny-org/race/revision/")]
    assert len(listings) == 2  # one download: our listing + snapshot_download's own repo_info


def test_resolve_config_paths_names_the_key_and_checks_data_ids(fake_hub, tiny_model_dir, tmp_path):
    from omegaconf import OmegaConf

    fake_hub.add("tiny-org/cfg", tiny_repo_files(tiny_model_dir))
    cfg = OmegaConf.create(
        {
            "data": {"train_files": str(tmp_path / "t.parquet"), "val_files": None, "tokenizer": None},
            "actor_rollout_ref": {"model": {"path": "tiny-org/cfg", "tokenizer_path": None}},
            "critic": {"enable": False, "model": {"path": "tiny-org/missing"}},
            "reward_model": {"enable": True, "model": {"path": "tiny-org/missing", "input_tokenizer": None}},
            "algorithm": {"adv_estimator": "grpo"},
        }
    )
    with pytest.raises(ModelPathError, match=r"^reward_model\.model\.path: model 'tiny-org/missing'"):
        run_paths.resolve_config_paths(cfg)
    cfg.reward_model.enable = False  # the critic is off too: its path is never looked at
    resolved = run_paths.resolve_config_paths(cfg)
    assert list(resolved) == ["actor_rollout_ref.model.path"] and os.path.isdir(
        resolved["actor_rollout_ref.model.path"]
    )

    cfg.data.train_files = ["openai/gsm8k"]
    with pytest.raises(
        hub.DatasetPathError, match=r"^data\.train_files: 'openai/gsm8k' is not a file.*data_preprocess"
    ):
        run_paths.resolve_config_paths(cfg)


# ------------------------------------------------------------------------------------------------ subprocesses
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_OFFLINE"))}
    env.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "TOKENIZERS_PARALLELISM": "false", **extra})
    return env


def test_subprocess_download_through_hf_endpoint_and_hf_home(tmp_path, tiny_model_dir):
    """The environment variables users set (HF_ENDPOINT, HF_HOME) steer a fresh process; .bin files are skipped."""
    with FakeHub() as server:
        commit = server.add("tiny-org/env", tiny_repo_files(tiny_model_dir))
        code = (
            "from verl.models.loader import resolve_model_path, load_causal_lm\n"
            "p = resolve_model_path('tiny-org/env'); load_causal_lm(p); print(p)\n"
        )
        env = _env(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hfhome"), HF_HUB_DISABLE_PROGRESS_BARS="1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip().splitlines()[-1]
    assert path == str(tmp_path / "hfhome" / "hub" / "models--tiny-org--env" / "snapshots" / commit)
    assert "pytorch_model.bin" not in os.listdir(path) and "tf_model.h5" not in os.listdir(path)
    assert not any(p.endswith((".bin", ".h5", ".msgpack", ".onnx", ".pth")) for _, p in server.requests)


def test_main_ppo_offline_unknown_model_exits_2_in_one_line(tmp_path):
    """HF_HUB_OFFLINE=1 and an id not in the cache: main_ppo's run path (not --cfg job) stops before any worker."""
    cmd = [
        sys.executable, "-m", "verl.trainer.main_ppo",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        f"data.train_files={REPO / 'verl' / 'data' / 'arithmetic' / 'train.parquet'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.logger=[console]",
    ]  # fmt: skip
    env = _env(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hfhome"))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=str(tmp_path))
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert "Traceback" not in out.stderr
    error = [line for line in lines if "Qwen/Qwen2.5-0.5B-Instruct" in line]
    assert len(error) == 1, out.stderr
    assert "actor_rollout_ref.model.path: model 'Qwen/Qwen2.5-0.5B-Instruct'" in error[0]
    assert "HF_HUB_OFFLINE=1 is set" in error[0] and "hf download Qwen/Qwen2.5-0.5B-Instruct" in error[0]


@pytest.mark.parametrize("entry", ["main_sft", "main_dpo", "main_kto", "main_eval", "serve", "model_merger"])
def test_every_entry_point_reports_an_unobtainable_model_in_one_line(entry, tmp_path, monkeypatch, capsys):
    """Offline, an id not in the cache: each command prints one line naming the id and exits with code 2."""
    import importlib

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = "tiny-org/not-cached"
    parquet = str(REPO / "verl" / "data" / "arithmetic" / "test.parquet")
    out = f"trainer.default_local_dir={tmp_path / 'out'}"
    if entry == "serve":
        pytest.importorskip("uvicorn")
        module, argv = "verl.serve.__main__", [model]
    elif entry == "model_merger":
        adapter = tmp_path / "adapter"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": model}))
        (adapter / "adapter_model.safetensors").write_bytes(b"")
        module = "verl.model_merger.__main__"
        argv = ["merge", "--local_dir", str(adapter), "--target_dir", str(tmp_path / "m")]
    elif entry == "main_eval":
        module, argv = "verl.trainer.main_eval", [f"model.path={model}", f"data.path={parquet}"]
    else:
        module, argv = f"verl.trainer.{entry}", [f"model.path={model}", f"data.train_files={parquet}", out]
    code = importlib.import_module(module).main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if model in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "HF_HUB_OFFLINE=1 is set" in lines[0] and f"hf download {model}" in lines[0]


def test_main_ppo_refuses_a_hub_dataset_id_as_train_files(tmp_path, capsys):
    from verl.trainer import main_ppo

    argv = ["data.train_files=openai/gsm8k", f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    assert main_ppo.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "data.train_files: 'openai/gsm8k' is not a file" in err
    assert "examples/data_preprocess/gsm8k.py" in err
