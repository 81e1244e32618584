"""The rollout section (``actor_rollout_ref.rollout``): the generation engine and its sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from verl.base_config import BaseConfig, dict_field
from verl.sections.literals import ComputeDType
from verl.sections.profiler import ProfilerConfig


@dataclass
class ValKwargsConfig(BaseConfig):
    """``rollout.val_kwargs``: sampling used during validation (greedy by default)."""

    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1


@dataclass
class MultiTurnConfig(BaseConfig):
    """``rollout.multi_turn``: multi-turn rollouts with tools and interactions (``docs/agent_loop.md``)."""

    enable: bool = False
    max_assistant_turns: Optional[int] = None  # null: limited by response_length only
    max_user_turns: Optional[int] = None  # interaction replies; null: no limit
    max_parallel_calls: int = 1  # tool calls of one turn run concurrently; more are answered with an error
    max_tool_response_length: int = 256  # characters of a tool reply shown to the model
    tool_response_truncate_side: Literal["left", "right", "middle"] = "middle"
    tool_config_path: Optional[str] = None  # tools: - class_name, config, tool_schema
    function_tool_path: Optional[str] = None  # python file of @function_tool functions (verl.tools.function_tool)
    interaction_config_path: Optional[str] = None  # interaction: - name, class_name, config
    format: str = "hermes"  # tool-call format of the model's output: hermes | gpt-oss | kimi
    tokenization_sanity_check_mode: Literal["strict", "ignore_strippable", "disable"] = "strict"


@dataclass
class OpenAIAgentConfig(BaseConfig):
    """``rollout.agent.openai``: the ``openai_agent`` loop, an agent of any framework trained through an
    OpenAI-compatible endpoint on 127.0.0.1 (``docs/any_agent.md``). Exactly one of ``agent``/``command``."""

    agent: Optional[str] = None  # module:function or file.py:function, run(task, base_url, api_key) -> reward
    command: Optional[str] = None  # a command per trajectory, with OPENAI_BASE_URL, OPENAI_API_KEY, VERL_AGENT_TASK
    timeout_s: float = 300.0  # per trajectory; a hung agent is cancelled (its process killed) and fails
    max_requests: int = 32  # generation requests per trajectory; more are refused (400) and the trajectory fails
    reward: Literal["agent", "reward_function", "judge"] = "agent"  # agent: the agent's return value (stdout)
    on_failure: Literal["drop", "score"] = "drop"  # drop: mask 0, no gradient; score: keep it with failure_score
    failure_score: float = 0.0  # the reward of a failed trajectory with on_failure=score
    model_name: str = "policy"  # the model id /v1/models lists (requests may name any model)
    request_sampling: bool = True  # honour a request's temperature/top_p (false: the rollout's sampling)
    # all: every segment of a trajectory whose agent rewrote its history is a training row; last: the last one only
    train_segments: Literal["all", "last"] = "all"


@dataclass
class AgentConfig(BaseConfig):
    """``rollout.agent``: the agent loops that run multi-turn rollouts."""

    num_workers: int = 1  # event-loop threads the batch's trajectories are split over
    default_agent_loop: str = "single_turn_agent"  # for rows without an agent_name column
    agent_loop_config_path: Optional[str] = None  # - name, _target_ of user agent loops
    openai: OpenAIAgentConfig = field(default_factory=OpenAIAgentConfig)


@dataclass
class HFEngineKwargsConfig(BaseConfig):
    """``rollout.engine_kwargs.hf``: the ``hf`` engine's decode loop (verl/workers/rollout/decode/, docs/rollout.md).

    ``decode_mode``: ``eager`` | ``compile`` | ``cuda_graph`` | ``compile_cuda_graph`` (the CUDA-graph modes need a
    CUDA device and ``enforce_eager=false``); null: ``enforce_eager`` decides (eager, or CUDA graphs on CUDA).
    ``decode_weights``: decode with the static-cache forward's stacked weight copy in the compute dtype; null: in the
    CUDA-graph modes, where the model's layers allow it.
    """

    decode_mode: Optional[Literal["eager", "compile", "cuda_graph", "compile_cuda_graph"]] = None
    decode_weights: Optional[bool] = None


@dataclass
class EngineKwargsConfig(BaseConfig):
    """``rollout.engine_kwargs``: extra arguments of each engine (``vllm``: ``vllm.LLM`` kwargs; ``hf``: its decode
    loop)."""

    vllm: dict[str, Any] = dict_field()
    hf: HFEngineKwargsConfig = field(default_factory=HFEngineKwargsConfig)


@dataclass
class CheckpointEngineConfig(BaseConfig):
    """``rollout.checkpoint_engine``: how the trainer's weights reach the rollout engine (upstream v0.9).

    ``naive`` (upstream's colocated in-process sync) is ours: the actor hands the engine a lazy stream of tensors,
    gathered one at a time, so a transfer never holds more than one tensor beyond the engine's own copy; that is
    within any ``update_weights_bucket_megabytes`` cap (the bucket only bounds the staging buffer's size).
    """

    backend: Literal["naive"] = "naive"
    update_weights_bucket_megabytes: int = 2048
    engine_kwargs: dict[str, Any] = dict_field()
    custom_backend_module: Optional[str] = None


@dataclass
class TraceConfig(BaseConfig):
    """``rollout.trace`` (January 2026's rollout tracing to weave / mlflow): only ``backend: null`` (no tracing)
    here, checked in ``verl/trainer/config/multi_turn_checks.py``; ``trainer.rollout_data_dir`` dumps each step's
    generations instead."""

    backend: Optional[Literal["weave", "mlflow"]] = None
    token2text: bool = False
    max_samples_per_step_per_worker: Optional[int] = None


@dataclass
class RolloutConfig(BaseConfig):
    """``actor_rollout_ref.rollout``: the generation engine and its sampling parameters."""

    name: Literal["auto", "hf", "vllm"] = "auto"
    # sync: each batch generated by the engines as one call; async (upstream's AsyncLLM servers): every prompt through
    # the agent loops over the request server (single_turn_agent unless a row's agent_name says otherwise)
    mode: Literal["sync", "async"] = "sync"
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    response_length: int = 512  # YAML: ${data.max_response_length}
    prompt_length: int = 512  # YAML: ${data.max_prompt_length}
    min_new_tokens: int = 0
    dtype: ComputeDType = "auto"
    gpu_memory_utilization: float = 0.5
    tensor_model_parallel_size: int = 1
    # upstream v0.9's other engine layouts: only 1 here (one engine per tensor-parallel group of actor ranks)
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    max_num_seqs: int = 256
    enforce_eager: bool = False  # false: decode with CUDA graphs (vLLM, and the hf engine on CUDA)
    free_cache_engine: bool = True
    calculate_log_probs: bool = False
    # after each weight sync compare digests of the trainer's and the engine's tensors (docs/trust.md)
    check_weight_sync: bool = True
    ignore_eos: bool = False  # true: decode to response_length past EOS, every token in the response mask
    log_prob_micro_batch_size_per_gpu: int = 32
    log_prob_micro_batch_size: Optional[int] = None  # deprecated global size (see actor.ppo_micro_batch_size)
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    seed: int = 0
    # vLLM engine options (vllm.LLM / EngineArgs arguments of the same names); the hf engine has no equivalent
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: int = 8192
    max_model_len: Optional[int] = None  # null: prompt_length + response_length
    enable_prefix_caching: bool = True
    disable_log_stats: bool = True
    load_format: str = "auto"  # auto | dummy | safetensors | pt | ...: how vLLM initialises weights before the sync
    layered_summon: bool = False  # sync weights to the engine one sharded layer at a time
    # vLLM sleep mode: wake the weights for the sync, the KV cache only after it; always staged here
    multi_stage_wake_up: bool = False
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)  # upstream v0.9 (docs/profiling.md)


def agent_loops_on(rollout: Any) -> bool:
    """Whether rollouts go through the agent loops: ``rollout.multi_turn.enable`` (tools, interactions, other loops)
    or ``rollout.mode=async`` (upstream's asynchronous rollout: every prompt a ``single_turn_agent`` request unless its
    row names a loop). ``rollout`` is the section as a dataclass or an OmegaConf node."""
    return bool(rollout.multi_turn.enable) or str(rollout.mode) == "async"
