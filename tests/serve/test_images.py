"""``verl serve`` with a tiny random Qwen2-VL: OpenAI ``image_url`` parts as data URLs and allowed local files;
remote URLs and files outside the allowed directory refused."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image

from verl.serve import ServeConfig


def _png(rgb=(200, 10, 10), size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, rgb).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory, start_server):
    from verl.models.tiny_vlm import make_tiny_vlm

    root = tmp_path_factory.mktemp("serve_vlm")
    make_tiny_vlm("qwen2_vl", save_dir=str(root / "model"))
    media = root / "media"
    media.mkdir()
    (media / "red.png").write_bytes(_png())
    (root / "secret.png").write_bytes(_png())
    config = ServeConfig(
        model=str(root / "model"), engine="hf", max_new_tokens=4, batch_wait_ms=50, allowed_local_media_path=str(media)
    )
    with start_server(config) as srv:
        yield srv, root


def _chat(client: httpx.Client, url: str, **extra) -> httpx.Response:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What colour?"}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0, **extra}
    return client.post("/v1/chat/completions", json=body)


def test_image_url_parts_are_served(vlm_server) -> None:
    srv, root = vlm_server
    data_url = "data:image/png;base64," + base64.b64encode(_png()).decode()
    with httpx.Client(base_url=srv.url, timeout=60) as client:
        inline = _chat(client, data_url)
        assert inline.status_code == 200, inline.text
        usage = inline.json()["usage"]
        # the prompt holds the image's placeholder tokens (the text alone is fewer tokens)
        assert usage["completion_tokens"] >= 1 and usage["prompt_tokens"] > len("<|user|>What colour?\n<|assistant|>")
        local = _chat(client, str(root / "media" / "red.png"))
        assert local.status_code == 200, local.text
        # the same image, greedy: the same answer whichever way it was sent
        assert local.json()["choices"][0]["message"]["content"] == inline.json()["choices"][0]["message"]["content"]
        blue = _chat(client, "data:image/png;base64," + base64.b64encode(_png((0, 0, 250), (60, 60))).decode())
        assert blue.status_code == 200 and blue.json()["usage"]["prompt_tokens"] != usage["prompt_tokens"]
        for url, code in [
            ("https://example.com/a.png", "remote_image_disabled"),
            (str(root / "secret.png"), "local_image_disabled"),
            ("data:image/png;base64,not-base64!", "invalid_image"),
        ]:
            refused = _chat(client, url)
            assert refused.status_code == 400, url
            err = refused.json()["error"]
            assert err["code"] == code and err["param"] == "messages[0].content[0].image_url", err
        text_only = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert text_only.status_code == 200
