"""The real SmolLM2-135M-Instruct target (fetched by `make assets`): lossless greedy with a random drafter,
streaming and stop strings, and constant drafter memory."""

from __future__ import annotations

import threading

import pytest
import torch
from tiny_models import make_drafter
from transformers import TextIteratorStreamer

from dlite_hf.chat_template import chat_prompt_ids
from dlite_hf.data.prompts import load_prompts

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def random_drafter(smollm2):
    target, _ = smollm2
    return make_drafter(
        target,
        seed=0,
        num_target_layers_tapped=6,
        target_name_or_path="smollm2-135m",
        hidden_size=128,
        intermediate_size=None,  # the config's default, 3 x hidden
        head_rank=32,
    )


def _real_prompts(tokenizer):
    prompts = load_prompts("chat", "eval", limit=2) + load_prompts("code", "eval", limit=2)
    prompts += load_prompts("math", "eval", limit=1) + load_prompts("tool", "eval", limit=1)
    return [torch.tensor([chat_prompt_ids(tokenizer, p["messages"])]) for p in prompts]


def _stopped(target, tokenizer, ids, stop, **assistant):
    """Greedy decoding of `ids` to 40 new tokens that stops at the stop string `stop` (`assistant`: how to draft)."""
    return target.generate(
        ids, max_new_tokens=40, do_sample=False, stop_strings=[stop], tokenizer=tokenizer, **assistant
    )


def test_random_drafter_is_lossless_on_real_prompts(smollm2, random_drafter):
    target, tokenizer = smollm2
    checked = 0
    for ids in _real_prompts(tokenizer):
        plain = target.generate(ids, max_new_tokens=24, do_sample=False)
        assisted = target.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=random_drafter)
        assert torch.equal(plain, assisted), tokenizer.decode(plain[0, ids.shape[1] :])
        assert random_drafter.last_generation_stats.rounds > 0
        checked += 1
    assert checked >= 5


def test_text_iterator_streamer_and_stop_strings(smollm2, random_drafter):
    target, tokenizer = smollm2
    ids = _real_prompts(tokenizer)[2]
    plain = target.generate(ids, max_new_tokens=40, do_sample=False)
    text = tokenizer.decode(plain[0, ids.shape[1] :], skip_special_tokens=True)
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    kwargs = dict(max_new_tokens=40, do_sample=False, assistant_model=random_drafter, streamer=streamer)
    worker = threading.Thread(target=lambda: target.generate(ids, **kwargs))
    worker.start()
    streamed = "".join(streamer)
    worker.join()
    assert streamed == text

    words = text.split()
    stop = words[min(5, len(words) - 1)]
    plain_stop = _stopped(target, tokenizer, ids, stop)
    fast_stop = _stopped(target, tokenizer, ids, stop, assistant_model=random_drafter)
    assert torch.equal(plain_stop, fast_stop)
    assert plain_stop.shape[1] < plain.shape[1]


def test_hybrid_is_lossless_on_real_agentic_turns_and_reuses_the_session(smollm2):
    """Hybrid drafting with the shipped drafter on a real coding-agent session (stdlib files as tool results) and a
    ToolTalk conversation: every turn identical to plain greedy, the second turn reuses the first turn's index."""
    from transformers import AutoModel

    from dlite_hf import DraftSession
    from dlite_hf.data.workloads import CODING_TASKS, coding_session, tooltalk_sessions
    from dlite_hf.defaults import default_drafter_dir

    target, tokenizer = smollm2
    drafter = AutoModel.from_pretrained(default_drafter_dir())
    sessions = [coding_session(CODING_TASKS[1], tokenizer, 4096, 700), *tooltalk_sessions(1)]
    lookup_accepted = 0
    for agent_session in sessions:
        history: list[dict[str, str]] = []
        draft_session = DraftSession()
        first_prompt_tokens = 0
        for index, turn in enumerate(agent_session["turns"][:2]):
            messages = history + list(turn)
            ids = torch.tensor([chat_prompt_ids(tokenizer, messages)])
            plain = target.generate(ids, max_new_tokens=32, do_sample=False)
            with draft_session:
                hybrid = target.generate(
                    ids, max_new_tokens=32, do_sample=False, assistant_model=drafter, prompt_lookup_num_tokens=16
                )
            assert torch.equal(plain, hybrid), (agent_session["id"], index)
            stats = drafter.last_generation_stats
            if index == 1:  # the first turn's prompt (at least) was not indexed again
                assert first_prompt_tokens <= stats.lookup_index_reused < ids.shape[1]
            else:
                first_prompt_tokens = ids.shape[1]
            lookup_accepted += stats.lookup_accepted
            reply = tokenizer.decode(plain[0, ids.shape[1] :], skip_special_tokens=True).strip()
            history = messages + [{"role": "assistant", "content": reply}]
    assert lookup_accepted > 0


def test_hybrid_stops_at_stop_strings_inside_a_retrieved_block(smollm2, random_drafter):
    """A session that already saw the whole reply retrieves it in long blocks; a stop string inside such a block
    must end the output exactly where plain decoding ends it."""
    from dlite_hf import DraftSession

    target, tokenizer = smollm2
    ids = _real_prompts(tokenizer)[2]
    plain = target.generate(ids, max_new_tokens=40, do_sample=False)
    words = tokenizer.decode(plain[0, ids.shape[1] :], skip_special_tokens=True).split()
    checked = 0
    for stop in dict.fromkeys(words[3:9]):
        expected = _stopped(target, tokenizer, ids, stop)
        session = DraftSession(min_match=1)
        with session:
            session.index.start_stream(plain[0].tolist())  # the reply is in the index: retrieved in one block
            hybrid = _stopped(
                target, tokenizer, ids, stop, assistant_model=random_drafter, prompt_lookup_num_tokens=32
            )
        assert torch.equal(hybrid, expected), stop
        assert random_drafter.last_generation_stats.lookup_rounds > 0
        checked += expected.shape[1] < plain.shape[1]
    assert checked >= 3
