"""Reward wiring from the config: custom reward function files, manager selection, remote URL, compute_reward."""

from __future__ import annotations

import json
import os
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.config import ConfigError
from verl.trainer.ppo.reward import compute_reward, get_custom_reward_fn, load_reward_manager
from verl.workers.reward_manager import BatchRewardManager, DAPORewardManager, NaiveRewardManager

CONFIG_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "verl", "trainer", "config", "ppo_trainer.yaml")


def _config(**overrides):
    cfg = OmegaConf.load(CONFIG_PATH)
    cfg.merge_with(OmegaConf.from_dotlist([f"{k}={v}" for k, v in overrides.items()]))
    return cfg


def _batch(tok, responses, ground_truths, resp_len=8) -> DataProto:
    bs = len(responses)
    pad, eos = tok.pad_token_id, tok.eos_token_id
    prompts = torch.tensor([list(b"Q:")] * bs)
    r_ids = torch.full((bs, resp_len), pad)
    r_mask = torch.zeros((bs, resp_len), dtype=torch.long)
    for i, r in enumerate(responses):
        ids = (list(r.encode()) + [eos])[:resp_len]
        r_ids[i, : len(ids)] = torch.tensor(ids)
        r_mask[i, : len(ids)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": r_ids,
            "attention_mask": torch.cat([torch.ones_like(prompts), r_mask], dim=1),
            "response_mask": r_mask,
        },
        non_tensors={
            "data_source": ["arithmetic"] * bs,
            "reward_model": [{"style": "rule", "ground_truth": g} for g in ground_truths],
            "extra_info": [{"index": i} for i in range(bs)],
        },
    )


CUSTOM_REWARD = textwrap.dedent(
    """
    def my_reward(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, **kwargs):
        correct = solution_str.strip() == ground_truth
        return {"score": float(correct) + bonus, "length": len(solution_str)}

    def batch_reward(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
        return [len(s) for s in solution_strs]

    NOT_CALLABLE = 3
    """
)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(CUSTOM_REWARD)
    return str(path)


def test_custom_function_with_kwargs(reward_file):
    cfg = _config(**{"custom_reward_function.path": reward_file, "custom_reward_function.name": "my_reward"})
    cfg.custom_reward_function.reward_kwargs = {"bonus": 0.5}
    fn = get_custom_reward_fn(cfg)
    assert fn("arithmetic", "4", "4") == {"score": 1.5, "length": 1}
    assert fn.__name__ == "my_reward"
    assert get_custom_reward_fn(_config()) is None


def test_custom_function_errors_name_file_and_function(reward_file, tmp_path):
    with pytest.raises(AttributeError, match=r"'missing' not found in .*my_reward\.py.*my_reward"):
        get_custom_reward_fn(
            _config(**{"custom_reward_function.path": reward_file, "custom_reward_function.name": "missing"})
        )
    with pytest.raises(TypeError, match="'NOT_CALLABLE'.*not callable"):
        get_custom_reward_fn(
            _config(**{"custom_reward_function.path": reward_file, "custom_reward_function.name": "NOT_CALLABLE"})
        )
    with pytest.raises(FileNotFoundError, match=r"nowhere\.py does not exist") as missing:
        get_custom_reward_fn(_config(**{"custom_reward_function.path": str(tmp_path / "nowhere.py")}))
    # a config error too: the entry points print its one line and exit 2 before any model loads
    assert isinstance(missing.value, ConfigError) and "\n" not in str(missing.value)
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(ImportError, match=r"importing .*broken\.py failed: SyntaxError"):
        get_custom_reward_fn(_config(**{"custom_reward_function.path": str(broken)}))


def test_load_default_naive_and_compute_reward(byte_tokenizer):
    manager = load_reward_manager(_config(), byte_tokenizer, num_examine=0)
    assert isinstance(manager, NaiveRewardManager) and manager.on_error == "fail" and manager.timeout_s == 30.0
    data = _batch(byte_tokenizer, ["5", "six"], ["5", "6"])
    reward, extra = compute_reward(data, manager)
    expected = torch.zeros(2, 8)
    expected[0, 1] = 1.0
    assert torch.equal(reward, expected) and extra == {}


def test_load_custom_function_into_managers(byte_tokenizer, reward_file):
    base = {"custom_reward_function.path": reward_file, "custom_reward_function.name": "my_reward"}
    data = _batch(byte_tokenizer, ["5", "abc"], ["5", "6"])
    naive = load_reward_manager(_config(**base, **{"reward_model.on_error": "zero"}), byte_tokenizer, 0)
    reward, extra = compute_reward(data, naive)
    assert reward.sum(-1).tolist() == [1.0, 0.0]
    assert extra["length"] == [1, 3] and extra["reward_error"] == [0, 0]
    # a per-sample custom function given to the batch manager is looped over
    batch = load_reward_manager(_config(**base, **{"reward_model.reward_manager": "batch"}), byte_tokenizer, 0)
    assert isinstance(batch, BatchRewardManager)
    assert compute_reward(data, batch)[0].sum(-1).tolist() == [1.0, 0.0]
    # a batch-contract custom function is called with lists
    batch_fn_cfg = _config(
        **{
            "custom_reward_function.path": reward_file,
            "custom_reward_function.name": "batch_reward",
            "reward_model.reward_manager": "batch",
        }
    )
    assert compute_reward(data, load_reward_manager(batch_fn_cfg, byte_tokenizer, 0))[0].sum(-1).tolist() == [1, 3]


def test_load_dapo_with_overlong(byte_tokenizer):
    cfg = _config(
        **{
            "reward_model.reward_manager": "dapo",
            "reward_model.overlong_buffer.enable": True,
            "reward_model.overlong_buffer.len": 4,
            "data.max_response_length": 8,
        }
    )
    manager = load_reward_manager(cfg, byte_tokenizer, 0)
    assert isinstance(manager, DAPORewardManager) and manager.max_resp_len == 8 and manager.overlong_len == 4
    reward, extra = compute_reward(_batch(byte_tokenizer, ["123456"], ["123456"]), manager)
    assert reward.sum().item() == pytest.approx(1.0 - (7 - 4) / 4)  # 7 valid tokens, factor 1.0
    assert extra["acc"] == [1.0]
    with pytest.raises(ValueError, match="Unknown reward manager: nope"):
        load_reward_manager(_config(**{"reward_model.reward_manager": "nope"}), byte_tokenizer, 0)
    with pytest.raises(TypeError, match="unknown arguments"):
        load_reward_manager(_config(), byte_tokenizer, 0, typo_kwarg=1)


GDPO_REWARD = textwrap.dedent(
    """
    def compute_score(data_source, solution_str, ground_truth, extra_info, step=0):
        # as upstream's rlla.py: the chat format is chosen by the run's name, unknown names are an error
        if "qwen" not in extra_info.get("experiment_name", ""):
            raise NotImplementedError(f"Unknown model name: {extra_info.get('experiment_name')}")
        accuracy = 3.0 if solution_str.strip() == ground_truth else -3.0
        fmt = 1.0 if solution_str.strip().isdigit() else 0.0
        return {"score": accuracy + fmt, "format_reward": fmt, "accuracy_reward": accuracy}
    """
)


def test_gdpo_manager_gives_the_scorer_the_run_name_as_upstreams_gdpo_script_needs(byte_tokenizer, tmp_path):
    """examples/gdpo_trainer (v0.9): reward.reward_manager.name=gdpo, a scorer that reads extra_info's
    experiment_name and returns the components algorithm.gdpo_reward_keys names."""
    from verl.trainer.config import load_config
    from verl.workers.reward_manager import GDPORewardManager

    path = tmp_path / "rlla_like.py"
    path.write_text(GDPO_REWARD)
    keys = ["reward.reward_manager.name=gdpo", f"reward.custom_reward_function.path={path}",
            "trainer.experiment_name=qwen3_8b_vllm_fsdp"]  # fmt: skip
    manager = load_reward_manager(load_config(keys), byte_tokenizer, 0)
    assert isinstance(manager, GDPORewardManager) and manager.experiment_name == "qwen3_8b_vllm_fsdp"
    reward, extra = compute_reward(_batch(byte_tokenizer, ["12", "x"], ["12", "12"]), manager)
    assert reward.sum(-1).tolist() == [4.0, -3.0]
    assert extra["accuracy_reward"] == [3.0, -3.0] and extra["format_reward"] == [1.0, 0.0]
    # the naive manager does not add the name: the same scorer fails there, as it does upstream
    naive = load_reward_manager(load_config([*keys[1:], "reward.reward_manager.name=naive"]), byte_tokenizer, 0)
    with pytest.raises(Exception, match="Unknown model name"):
        compute_reward(_batch(byte_tokenizer, ["12"], ["12"]), naive)
    # an unknown manager is a config error: one line, exit 2 at run start
    with pytest.raises(ConfigError, match=r"^Unknown reward manager: nope\. Set reward.reward_manager.name"):
        load_reward_manager(load_config(["reward.reward_manager.name=nope"]), byte_tokenizer, 0)


def test_reward_kwargs_reach_the_manager_as_in_verls_dapo_scripts(byte_tokenizer):
    """verl's DAPO scripts pass the overlong penalty as +reward_model.reward_kwargs.* (the loader's + keys)."""
    from verl.trainer.config import load_config

    cfg = load_config(
        [
            "reward_model.reward_manager=dapo",
            "data.max_response_length=16",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
            "+reward_model.reward_kwargs.max_resp_len=8",
        ]
    )
    manager = load_reward_manager(cfg, byte_tokenizer, 0)
    assert manager.overlong_enable and manager.overlong_len == 4 and manager.max_resp_len == 8
    # log is not given under reward_kwargs: it keeps reward_model.overlong_buffer.log (merged key by key)
    assert manager.overlong_log is False and manager.overlong_penalty_factor == 0.5
    reward, _ = compute_reward(_batch(byte_tokenizer, ["123456"], ["123456"]), manager)
    assert reward.sum().item() == pytest.approx(1.0 - (7 - 4) / 4 * 0.5)
    naive_cfg = load_config(["+reward_model.reward_kwargs.not_an_argument=1"])
    with pytest.raises(TypeError, match=r"reward_model.reward_kwargs=\{'not_an_argument': 1\}"):
        load_reward_manager(naive_cfg, byte_tokenizer, 0)


def test_remote_url_config(byte_tokenizer, reward_file):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            out = json.dumps({"score": float(body["solution_str"] == body["ground_truth"]) * 2}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/score"
        data = _batch(byte_tokenizer, ["5", "7"], ["5", "6"])
        for name in ("naive", "batch"):
            cfg = _config(**{"reward_model.remote.url": url, "reward_model.reward_manager": name})
            reward, _ = compute_reward(data, load_reward_manager(cfg, byte_tokenizer, 0))
            assert reward.sum(-1).tolist() == [2.0, 0.0]
        both = _config(**{"reward_model.remote.url": url, "custom_reward_function.path": reward_file})
        with pytest.raises(ValueError, match="choose one"):
            load_reward_manager(both, byte_tokenizer, 0)
    finally:
        server.shutdown()
        server.server_close()


def test_compute_reward_accepts_plain_tensor_functions():
    data = DataProto.from_dict(tensors={"responses": torch.zeros(2, 3, dtype=torch.long)})
    reward, extra = compute_reward(data, lambda d, return_dict=False: torch.ones(2, 3))
    assert reward.shape == (2, 3) and extra == {}
    with pytest.raises(TypeError, match="reward_tensor"):
        compute_reward(data, lambda d, return_dict=False: {"scores": 1})


def test_docs_custom_reward_example_runs(tmp_path, byte_tokenizer):
    """The custom reward example of docs/data_and_rewards.md works as written, through load_reward_manager."""
    docs = os.path.join(os.path.dirname(CONFIG_PATH), "..", "..", "..", "docs", "data_and_rewards.md")
    text = open(docs, encoding="utf-8").read()
    section = text.split("### A custom reward function", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my_reward.py"
    path.write_text(code)
    cfg = _config(**{"custom_reward_function.path": str(path)})
    cfg.custom_reward_function.reward_kwargs = {"length_penalty": 0.1}
    reward, extra = compute_reward(
        _batch(byte_tokenizer, ["it is 12", "3"], ["12", "4"]), load_reward_manager(cfg, byte_tokenizer, 0)
    )
    # "it is 12" is 8 characters but the response is cut at 8 tokens with no room for EOS: text is "it is 12"
    assert reward.sum(-1).tolist() == pytest.approx([1.0 - 0.1 * 8, 0.0 - 0.1 * 1])
    assert extra["correct"] == [True, False]


def test_compute_reward_async(byte_tokenizer):
    from verl.trainer.ppo.reward import compute_reward_async

    manager = load_reward_manager(_config(), byte_tokenizer, 0)
    future = compute_reward_async(_batch(byte_tokenizer, ["5"], ["5"]), manager)
    reward, extra = future.result(timeout=30)
    assert reward.sum().item() == 1.0 and extra == {}
    failing = compute_reward_async(_batch(byte_tokenizer, ["5"], ["5"]), lambda d, return_dict=False: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=30)


def test_reward_endpoints_and_sources_are_checked_before_training():
    import socket

    from verl.trainer.config.validation import ConfigError
    from verl.trainer.ppo.reward import check_reward_endpoints, check_reward_sources

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there any more
    up = f"http://127.0.0.1:{listening.getsockname()[1]}/score"
    try:
        check_reward_endpoints(OmegaConf.create({"reward_model": {"remote": {"url": up}}}))
        down = OmegaConf.create({"reward_model": {"sandbox_fusion": {"url": f"http://127.0.0.1:{closed_port}/run"}}})
        with pytest.raises(
            ConfigError, match=rf"reward_model.sandbox_fusion.url=.*cannot connect to 127.0.0.1:{closed_port}"
        ):
            check_reward_endpoints(down)
    finally:
        listening.close()

    class Rows:
        def data_sources(self, key):
            return {"arithmetic": ("train.parquet", 0), "mystery": ("train.parquet", 7)}

    config = OmegaConf.create({"data": {"reward_fn_key": "data_source"}, "reward_model": {}})
    with pytest.raises(ConfigError, match=r"data.train_files: train.parquet row 7: data_source='mystery'"):
        check_reward_sources(config, {"data.train_files": Rows()})
    custom = OmegaConf.merge(config, {"custom_reward_function": {"path": "my_reward.py"}})
    check_reward_sources(custom, {"data.train_files": Rows()})  # a custom function scores everything
