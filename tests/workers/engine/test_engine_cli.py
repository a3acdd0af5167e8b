"""CLI flags, size parsing, start-up validation, and the real-vLLM command line."""

from __future__ import annotations

import json

import pytest

from workers.engine.cli import build_parser, config_from_args, main
from workers.engine.config import parse_size
from workers.engine.vllm_command import vllm_command, vllm_env


def _config(*argv: str):
    return config_from_args(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("64M", 64 * 2**20),
        ("64MiB", 64 * 2**20),
        ("1G", 2**30),
        ("500m", 500_000_000),
        ("2k", 2000),
        ("1.5K", 1536),
    ],
)
def test_sizes_follow_vllm_human_readable_ints(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_flags_map_onto_the_engine_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    events = {"enable_kv_cache_events": True, "endpoint": "tcp://*:5557", "encoding": "array"}
    config = _config(
        "my/model",
        "--served-model-name",
        "alias",
        "--block-size",
        "32",
        "--kv-cache-memory",
        "8M",
        "--kv-cache-dtype",
        "bf16",
        "--max-model-len",
        "2k",
        "--enable-prompt-tokens-details",
        "--kv-events-config",
        json.dumps(events),
        "--api-key",
        "k1",
        "--api-key",
        "k2",
        "--no-enable-prefix-caching",
        "--prefix-caching-hash-algo",
        "sha256",
        "--num-layers",
        "3",
        "--hash-seed",
        "42",
    )
    assert (config.model, config.model_name) == ("my/model", "alias")
    cache = config.cache_config
    assert (cache.block_size, cache.kv_cache_memory_bytes, cache.cache_dtype) == (32, 2**23, "bf16")
    assert (cache.enable_prefix_caching, cache.prefix_caching_hash_algo) == (False, "sha256")
    assert cache.hash_seed == "42"
    assert config.max_model_len == 2000 and config.enable_prompt_tokens_details
    assert config.kv_events is not None and config.kv_events.encoding == "array"
    assert config.api_keys == ("k1", "k2") and config.dev_mode is False
    assert config.model_config.num_layers == 3
    # 3 layers x 2 KV heads x 32 dims x 2 K/V x 2 bytes (bf16)
    assert config.kv_bytes_per_token == 768
    assert config.num_gpu_blocks == 2**23 // (768 * 32)


def test_dev_mode_and_api_key_default_from_vllms_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    config = _config()
    assert config.dev_mode is True and config.api_keys == ("from-env",)
    assert _config("--no-dev-mode").dev_mode is False
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "0")
    assert _config().dev_mode is False


def test_bad_configurations_fail_fast_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--kv-cache-memory", "16K"]) == 2
    assert "at least 2" in capsys.readouterr().err
    # The default model needs 16 MiB for one 8,192-token request, as vLLM would check.
    assert main(["--kv-cache-memory", "8M"]) == 2
    assert "To serve at least one request" in capsys.readouterr().err
    assert main(["--max-model-len", "100000"]) == 2
    assert "max_position_embeddings" in capsys.readouterr().err
    assert main(["--num-heads", "3", "--num-kv-heads", "2"]) == 2
    assert main(["--kv-events-config", '{"enable_kv_cache_events": true, "x": 1}']) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["--prefix-caching-hash-algo", "xxhash"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'xxhash'" in capsys.readouterr().err


def test_vllm_command_launches_real_vllm_as_cacheplane_needs() -> None:
    argv = vllm_command(
        ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8001"],
        python="/opt/vllm/bin/python",
        kv_events_endpoint="tcp://*:5557",
        kv_events_replay_endpoint="tcp://*:5558",
        kv_events_topic="kv@10.0.0.7:8001@llama",
    )
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[-4:] == ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8001"]
    assert "--enable-prompt-tokens-details" in argv
    assert argv[argv.index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"
    events = json.loads(argv[argv.index("--kv-events-config") + 1])
    assert events == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "topic": "kv@10.0.0.7:8001@llama",
        "replay_endpoint": "tcp://*:5558",
    }
    assert vllm_env(hash_seed="0", api_key="k") == {
        "PYTHONHASHSEED": "0",
        "VLLM_SERVER_DEV_MODE": "0",
        "VLLM_API_KEY": "k",
    }
