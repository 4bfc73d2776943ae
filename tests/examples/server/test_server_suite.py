"""vLLM's OpenAI API server under concurrent clients, stock deadline shortened to 2 s.

The same false death as offline, seen from the clients: 64 streaming requests of the user's
own clients fail inside their streams while the worker computes; the policy survives; under
the guard 64 clients finish, and a crash is a genuine death.  Text, chat, streaming and plain
HTTP work with the bundled tokenizer.

Two servers, one per configuration, each ended by its last test's death: no restart.  (The
factory's explicit arguments are the operators suite's, on servers it starts anyway.)
"""

import json
import threading
import time
import urllib.request

import pytest

from pytest_enginedead import Verdict, assert_no_false_death

pytestmark = pytest.mark.enginedead_inject(slow_s_per_seq=0.05)


@pytest.mark.enginedead_batch_sizes(2)
@pytest.mark.enginedead_timeout(2)
def test_stock_deadline(vllm_server):
    """Batch 2 lives under the stock deadline.  (Batch 64's plain false death, what the
    clients saw included, is ``server_false_death``'s: one server start, not a restart here.)"""
    with assert_no_false_death(vllm_server):
        out = vllm_server.complete(max_tokens=4)
    assert [len(t) for t in out] == [4] * vllm_server.batch_size


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_timeout(2)
def test_stock_deadline_own_clients(vllm_server):
    """The user's own openai.OpenAI client in 64 threads, streaming: the death comes inside
    the streams (the status was already 200), and the verdict is the same even heard of late
    (by then the step has ended and vLLM's server has stopped its worker).  The last test of
    its server: the death ends it."""
    import openai

    client = openai.OpenAI(base_url=vllm_server.base_url, api_key="x", max_retries=0, timeout=120)
    errors = []

    def ask(i):
        try:
            for _ in client.completions.create(model=vllm_server.model, prompt=f"the city {i}", max_tokens=4,
                                               stream=True, extra_body={"ignore_eos": True}):
                pass
        except Exception as exc:
            errors.append(exc)

    with assert_no_false_death(vllm_server):
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            time.sleep(5)  # a client that hears of it late: retries, backoff, a slow loop
            # inside a stream (openai.APIError itself) if any stream was cut, else what came first
            raise next((e for e in errors if type(e) is openai.APIError), errors[0])


@pytest.mark.enginedead_batch_sizes(64)
def test_reference_policy(vllm_server):
    with assert_no_false_death(vllm_server):
        out = vllm_server.complete(max_tokens=4)
    assert [len(t) for t in out] == [4] * 64


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_inject()
def test_text_chat_streaming_and_plain_http(vllm_server):
    import openai

    client = openai.OpenAI(base_url=vllm_server.base_url, api_key="x", max_retries=0)
    text = client.completions.create(model=vllm_server.model, prompt="the capital of france is", max_tokens=5)
    assert text.choices[0].text.strip() and text.usage.completion_tokens == 5
    chat = client.chat.completions.create(
        model=vllm_server.model, messages=[{"role": "user", "content": "hello"}], max_tokens=5
    )
    assert chat.choices[0].message.content.strip()
    chunks = list(client.chat.completions.create(
        model=vllm_server.model, messages=[{"role": "user", "content": "hello"}], max_tokens=5, stream=True
    ))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    # the harness's own streaming client, on a server that lives
    assert [len(t) for t in vllm_server.complete(n=4, max_tokens=3, stream=True)] == [3] * 4
    body = json.dumps({"model": vllm_server.model, "prompt": "hello there", "max_tokens": 3}).encode()
    request = urllib.request.Request(vllm_server.base_url + "/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert json.loads(reply.read())["choices"][0]["text"].strip()
    assert vllm_server.health() == 200


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_inject(crash_at_step=2)
@pytest.mark.enginedead_guard(hang_s=5)  # the guarded server's last test: the crash ends it
def test_crash_is_genuine(vllm_server):
    """A worker that exits is a genuine death (DEAD), guard or not: vLLM's monitor's."""
    with pytest.raises(Exception) as info:
        with assert_no_false_death(vllm_server):
            vllm_server.complete(n=4, max_tokens=8)
    assert type(info.value).__module__.startswith("openai")
    assert vllm_server.deaths[-1]["verdict"] == Verdict.DEAD.name


@pytest.mark.enginedead_batch_sizes(64)
@pytest.mark.enginedead_timeout(2)
@pytest.mark.enginedead_guard(hang_s=5)
def test_the_guard_lets_64_clients_finish(vllm_server):
    with assert_no_false_death(vllm_server):
        out = vllm_server.complete(max_tokens=4)
    assert [len(t) for t in out] == [4] * 64
    assert {e.verdict for e in vllm_server.guard_events()} == {Verdict.SLOW}
