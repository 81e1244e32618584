"""Every data source of verl's default scorer is scored: DAPO/AIME, NuminaMath, code contests (local sandbox and a
Sandbox Fusion server on 127.0.0.1), Geometry3K, Search-R1 QA, math-verify; unknown sources fail naming the source."""

from __future__ import annotations

import json
import pickle
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl.rewards import (
    CODE_SOURCES,
    KNOWN_DATA_SOURCES,
    NUMINA_SOURCES,
    SEARCH_R1_SOURCES,
    default_compute_score,
    geo3k,
    math_dapo,
    math_verify,
    prime_code,
    prime_math,
    sandbox_fusion,
    search_r1_like_qa_em,
)

ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
STDIO_TESTS = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]})


# ---------------------------------------------------------------------------------------------- math_dapo / aime
@pytest.mark.parametrize("source", ["math_dapo", "aime2024", "aime2025"])
def test_dapo_and_aime_sources_use_the_minerva_answer_line(source):
    right = default_compute_score(source, "Let me think... 3 + 4 = 7.\nAnswer: 7", "7")
    wrong = default_compute_score(source, "Answer: 8", "7")
    missing = default_compute_score(source, "the result is 7", "7")
    assert right == {"score": 1.0, "acc": True, "pred": "7"}
    assert wrong["score"] == -1.0 and wrong["acc"] is False and wrong["pred"] == "8"
    assert missing["score"] == -1.0 and missing["pred"] == "[INVALID]"


def test_math_dapo_normalisation_and_tail():
    assert math_dapo.normalize_final_answer("x = \\frac12") == "\\frac{1}{2}"
    assert math_dapo.normalize_final_answer("1,000 dollars") == "1000"
    assert math_dapo.normalize_final_answer("\\text{(B)}") == "(B)"
    # only the last 300 characters count: an early answer line followed by a long tail is not read
    assert math_dapo.compute_score("Answer: 7\n" + "x" * 400, "7")["acc"] is False
    # strict box mode: the last \boxed{} of the last 100 characters must equal the reference exactly
    assert math_dapo.compute_score("so \\boxed{42}", "42", strict_box_verify=True)["score"] == 1.0
    assert math_dapo.compute_score("so \\boxed{41}", "42", strict_box_verify=True)["score"] == -1.0


# ---------------------------------------------------------------------------------------------- math-verify
def test_math_verify_symbolic_equivalence_and_threads():
    assert math_verify.compute_score("the answer is \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert math_verify.compute_score("\\boxed{3}", "0.5") == 0.0
    assert math_verify.verify_equivalent("x(x+2)", "x^2+2x") is True
    # reward managers score in threads, where math-verify's signal-based timeout cannot work
    out = []
    t = threading.Thread(target=lambda: out.append(math_verify.compute_score("\\boxed{1/2}", "\\frac{1}{2}")))
    t.start()
    t.join()
    assert out == [1.0]


def test_math_sources_accept_forms_only_math_verify_knows():
    # "x(x+2)" vs "x^2+2x" differ as strings; math-verify decides they are equal
    assert default_compute_score("lighteval/MATH", "\\boxed{x(x+2)}", "x^2+2x") == 1.0
    assert default_compute_score("HuggingFaceH4/MATH-500", "\\boxed{x(x+3)}", "x^2+2x") == 0.0


# ---------------------------------------------------------------------------------------------- numina (prime math)
@pytest.mark.parametrize("source", NUMINA_SOURCES)
def test_numina_sources(source):
    assert default_compute_score(source, "Step 1: ... Step 2: so \\boxed{\\dfrac{3}{4}}", "\\boxed{0.75}") == 1.0
    assert default_compute_score(source, "so \\boxed{2}", "3") == 0.0


def test_prime_math_contract():
    correct, fmt, pred = prime_math.compute_score("Step 1: a\nStep 2: b\n\\boxed{10}", "10")
    assert (correct, fmt, pred) == (True, True, "10")
    assert prime_math.compute_score("The final answer is 12.", "12")[0] is True
    assert prime_math.compute_score("no answer here", "12") == (False, False, "")


# ---------------------------------------------------------------------------------------------- code (local sandbox)
@pytest.mark.parametrize("source", CODE_SOURCES)
def test_code_sources_run_in_the_local_sandbox(source):
    assert default_compute_score(source, ADD_PROGRAM, STDIO_TESTS) == 1.0


def test_prime_code_partial_and_call_based():
    half = json.dumps({"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "8\n"]})
    assert prime_code.compute_score(ADD_PROGRAM, half)[0] is False
    score, meta = prime_code.compute_score(ADD_PROGRAM, half, continuous=True)
    assert score == 0.5 and meta["passed"] == 1 and meta["total"] == 2
    leetcode = {"fn_name": "add", "inputs": [[1, 2], "5\n6"], "outputs": [[3], 11]}
    solution = "class Solution:\n    def add(self, a, b):\n        return a + b\n"  # no fence: whole text is code
    assert prime_code.compute_score(solution, leetcode) == (True, {"passed": 2, "total": 2, "error": ""})
    assert prime_code.compute_score(solution.replace("a + b", "a - b"), leetcode)[0] is False
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        prime_code.compute_score(ADD_PROGRAM, {"inputs": ["1", "2"], "outputs": ["1"]})


# ---------------------------------------------------------------------------------------------- geo3k, search-R1
def test_geo3k_accuracy_and_format():
    assert default_compute_score("hiyouga/geometry3k", "<think>r</think> so \\boxed{30}", "30") == pytest.approx(1.0)
    assert default_compute_score("hiyouga/geometry3k", "so \\boxed{30}", "30") == pytest.approx(0.9)
    assert default_compute_score("hiyouga/geometry3k", "<think>r</think> \\boxed{31}", "30") == pytest.approx(0.1)
    assert geo3k.format_reward("no think \\boxed{1}") == 0.0


@pytest.mark.parametrize("source", SEARCH_R1_SOURCES)
def test_search_r1_sources_exact_match(source):
    prompt = "Answer inside <answer> and </answer>, e.g. <answer> Beijing </answer>. Question: capital of France?"
    gt = {"target": ["Paris", "Paris, France"]}
    assert default_compute_score(source, prompt + " <answer>The Paris</answer>", gt) == 1.0
    assert default_compute_score(source, prompt + " <answer>Lyon</answer>", gt) == 0.0
    # one tag only (the prompt's example): nothing extracted
    assert default_compute_score(source, "<answer>Paris</answer>", gt) == 0.0
    assert search_r1_like_qa_em.compute_score("<answer>x</answer><answer>Paris!</answer>", gt, format_score=0.2) == 1.0


# ---------------------------------------------------------------------------------------------- dispatch
def test_every_known_source_routes_and_unknown_fails():
    for source in KNOWN_DATA_SOURCES:
        if source in CODE_SOURCES:
            continue  # run above (subprocesses)
        result = default_compute_score(source, "Answer: 1 \\boxed{1} <answer>1</answer><answer>1</answer>", "1")
        assert isinstance(result, (float, dict)), source
    with pytest.raises(NotImplementedError, match=r"data_source='my/data'.*math_dapo.*aime"):
        default_compute_score("my/data", "x", "1")


# ---------------------------------------------------------------------------------------------- Sandbox Fusion
class _FakeSandboxFusion(ThreadingHTTPServer):
    """Speaks Sandbox Fusion's run_code protocol: runs nothing, answers from the stdin it gets."""

    daemon_threads = True

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.fail_first_with_504 = 0

        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    gateway_timeout = server.fail_first_with_504 > 0
                    server.fail_first_with_504 -= 1
                if gateway_timeout:
                    self.send_response(504)
                    self.end_headers()
                    return
                # the fake "program" adds the two numbers of stdin, except "9 9" crashes and "0 0" times out
                a, b = (int(x) for x in body["stdin"].split())
                if (a, b) == (9, 9):
                    reply = {"status": "Failed", "run_result": {"status": "Finished", "return_code": 1}}
                elif (a, b) == (0, 0):
                    reply = {"status": "Failed", "run_result": {"status": "TimeLimitExceeded"}}
                else:
                    run = {"status": "Finished", "return_code": 0, "stdout": f"{a + b}\n", "execution_time": 0.01}
                    reply = {"status": "Success", "compile_result": None, "run_result": run}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def fusion_server():
    server = _FakeSandboxFusion()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def test_sandbox_fusion_client_protocol(fusion_server):
    server, url = fusion_server
    tests = {"inputs": ["1 2\n", "9 9\n", "0 0\n", "2 2\n"], "outputs": ["3\n", "18\n", "0\n", "5\n"]}
    results, meta = sandbox_fusion.check_correctness(url, tests, "print(sum(map(int, input().split())))")
    assert results == [True, -2, -3, False]
    assert [m["status"] for m in meta] == ["success", "runtime_error", "timeout", "wrong_answer"]
    body = server.bodies[0]
    assert body["language"] == "python" and body["code"].startswith("print(") and body["run_timeout"] == 10
    score, _ = sandbox_fusion.compute_score(url, None, 256, "```python\nx\n```", tests, continuous=True)
    assert score == pytest.approx(0.25)
    assert server.bodies[-1]["memory_limit_MB"] == 256 and server.bodies[-1]["code"] == "x\n"


def test_sandbox_fusion_retries_gateway_timeouts_and_reports_unreachable(fusion_server, monkeypatch):
    server, url = fusion_server
    monkeypatch.setattr(sandbox_fusion, "INITIAL_RETRY_DELAY_S", 0.01)
    server.fail_first_with_504 = 1
    reply, error = sandbox_fusion.call_sandbox_api(url, "print(1)", "1 1\n", 1, 1)
    assert error is None and reply["run_result"]["stdout"] == "2\n"
    reply, error = sandbox_fusion.call_sandbox_api("http://127.0.0.1:9/run_code", "x", "", 1, 1)
    assert reply is None and "cannot reach http://127.0.0.1:9/run_code" in error


@pytest.mark.parametrize("source", CODE_SOURCES)
def test_default_scorer_uses_the_server_when_given(fusion_server, source):
    server, url = fusion_server
    sem = sandbox_fusion.ProcessLocalSemaphore(2)
    out = default_compute_score(source, ADD_PROGRAM, STDIO_TESTS, sandbox_fusion_url=url, concurrent_semaphore=sem)
    assert out == 1.0 and len(server.bodies) == 2
    # the semaphore travels to reward worker processes
    assert pickle.loads(pickle.dumps(sem)).value == 2


def test_reward_manager_config_binds_the_sandbox_url(fusion_server):
    from omegaconf import OmegaConf

    from verl.trainer.ppo.reward import load_reward_manager

    server, url = fusion_server
    cfg = OmegaConf.create(
        {
            "reward_model": {"reward_manager": "naive", "sandbox_fusion": {"url": url, "max_concurrent": 4}},
            "data": {"reward_fn_key": "data_source"},
        }
    )
    manager = load_reward_manager(cfg, tokenizer=None, num_examine=0)
    fn = manager.compute_score
    assert fn.keywords["sandbox_fusion_url"] == url and fn.keywords["memory_limit_mb"] == 1024
    assert fn("codeforces", ADD_PROGRAM, STDIO_TESTS) == 1.0 and len(server.bodies) == 2
    # reward worker processes receive the function by pickling
    assert pickle.loads(pickle.dumps(fn))("apps", ADD_PROGRAM, STDIO_TESTS) == 1.0 and len(server.bodies) == 4
