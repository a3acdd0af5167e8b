"""``/metrics``: vLLM's names, types, labels and buckets, with counters that add up."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from workers.engine.launcher import RunningWorker
from workers.engine.metrics import REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS

MODEL = "test/ref-tiny"
LABELS = {"engine": "0", "model_name": MODEL}


def _scrape(worker: RunningWorker) -> dict[str, dict]:
    response = httpx.get(f"{worker.base_url}/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def _value(families: dict, family: str, sample: str, **labels: str) -> float:
    wanted = {**LABELS, **labels}
    for s in families[family].samples:
        if s.name == sample and s.labels == wanted:
            return s.value
    raise AssertionError(f"{sample}{wanted} not exported")


def test_counters_agree_with_the_requests_sent(worker: RunningWorker) -> None:
    prompts = ["a" * 70, "a" * 70, "b" * 40, "a" * 70 + "tail"]
    usages = []
    for prompt in prompts:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "temperature": 0}
        usages.append(httpx.post(f"{worker.base_url}/v1/completions", json=body).json()["usage"])
    cached = [(u["prompt_tokens_details"] or {}).get("cached_tokens", 0) for u in usages]
    assert cached == [0, 64, 0, 64]
    prompt_tokens = sum(u["prompt_tokens"] for u in usages)

    m = _scrape(worker)
    assert m["vllm:prefix_cache_queries"].type == "counter"
    queries = _value(m, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total")
    assert queries == prompt_tokens
    assert _value(m, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == sum(cached)
    assert _value(m, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt_tokens
    assert _value(m, "vllm:generation_tokens", "vllm:generation_tokens_total") == 12
    by_source = "vllm:prompt_tokens_by_source_total"
    hit = _value(m, "vllm:prompt_tokens_by_source", by_source, source="local_cache_hit")
    computed = _value(m, "vllm:prompt_tokens_by_source", by_source, source="local_compute")
    assert (hit, computed) == (sum(cached), prompt_tokens - sum(cached))
    success = "vllm:request_success_total"
    assert _value(m, "vllm:request_success", success, finished_reason="length") == 4
    assert _value(m, "vllm:request_success", success, finished_reason="stop") == 0
    assert _value(m, "vllm:num_preemptions", "vllm:num_preemptions_total") == 0
    for gauge in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert m[gauge].type == "gauge"
        assert _value(m, gauge, gauge) == 0
    ttft = "vllm:time_to_first_token_seconds"
    assert _value(m, ttft, f"{ttft}_count") == 4
    assert (
        _value(m, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 4
    )


def test_histogram_buckets_are_vllms(worker: RunningWorker) -> None:
    m = _scrape(worker)

    def bounds(family: str) -> list[float]:
        return [float(s.labels["le"]) for s in m[family].samples if s.name.endswith("_bucket")]

    inf = float("inf")
    assert m["vllm:time_to_first_token_seconds"].type == "histogram"
    assert bounds("vllm:time_to_first_token_seconds") == [*TTFT_BUCKETS, inf]
    assert bounds("vllm:e2e_request_latency_seconds") == [*REQUEST_LATENCY_BUCKETS, inf]
    assert TTFT_BUCKETS[:4] == (0.001, 0.005, 0.01, 0.02) and TTFT_BUCKETS[-1] == 2560.0
    assert len(REQUEST_LATENCY_BUCKETS) == 21 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0
    assert bounds("vllm:request_prompt_tokens")[-2:] == [500.0, inf]  # 1-2-5 up to 512


def test_cache_config_info_has_no_model_name_and_string_labels(worker: RunningWorker) -> None:
    (sample,) = _scrape(worker)["vllm:cache_config_info"].samples
    assert sample.value == 1.0
    assert "model_name" not in sample.labels
    assert {
        "engine": "0",
        "block_size": "16",
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "num_gpu_blocks": "128",
        "prefix_caching_hash_algo": "sha256_cbor",
        "kv_cache_memory_bytes": str(128 * 16 * 512),
        "num_cpu_blocks": "None",
        "sliding_window": "None",
    }.items() <= sample.labels.items()


def test_engine_sleep_state_reports_awake(worker: RunningWorker) -> None:
    m = _scrape(worker)
    state = "vllm:engine_sleep_state"
    assert _value(m, state, state, sleep_state="awake") == 1
    assert _value(m, state, state, sleep_state="discard_all") == 0
