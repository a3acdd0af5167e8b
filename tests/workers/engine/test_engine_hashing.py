"""Block hashing: canonical CBOR bytes, the chain rule, salts, and the event hash width."""

from __future__ import annotations

import hashlib
import pickle

import pytest

from workers.engine.hashing import (
    BlockHasher,
    block_extra_keys,
    block_hash_chain,
    cbor_encode,
    event_hash,
    none_hash,
    sha256_cbor,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [  # RFC 8949 appendix A
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (100, "1864"),
        (1000, "1903e8"),
        (1000000, "1a000f4240"),
        (18446744073709551615, "1bffffffffffffffff"),
        (18446744073709551616, "c249010000000000000000"),
        (-1, "20"),
        (-100, "3863"),
        (-18446744073709551617, "c349010000000000000000"),
        (None, "f6"),
        (True, "f5"),
        (False, "f4"),
        ("", "60"),
        ("a", "6161"),
        ("\u00fc", "62c3bc"),
        (b"\x01\x02\x03\x04", "4401020304"),
        ([], "80"),
        ((1, [2, 3], (4, 5)), "8301820203820405"),
        ({"b": 1, "a": 2, "aa": 3}, "a3616102616201626161" + "03"),
    ],
)
def test_cbor_encoding_matches_rfc_8949_canonical_bytes(value: object, expected: str) -> None:
    assert cbor_encode(value).hex() == expected


def test_cbor_writes_what_vllm_hashes_floats_and_map_order_included() -> None:
    # vLLM hashes cbor2.dumps(x, canonical=True): shortest exact floats, keys sorted by
    # their encoding (length first), the same bytes whatever the insertion order.
    assert cbor_encode(1.5).hex() == "f93e00"
    assert cbor_encode(0.1).hex() == "fb3fb999999999999a"
    assert cbor_encode({"aa": 3, 10: 1, "a": 2}) == cbor_encode({"a": 2, 10: 1, "aa": 3})
    assert cbor_encode({"aa": 3, 10: 1, "a": 2}).hex() == "a30a0161610262616103"


def test_chain_follows_vllm_formula_with_salt_in_block_zero_only() -> None:
    tokens = list(range(40))
    seed_hash = hashlib.sha256(cbor_encode("7")).digest()
    assert none_hash("7") == seed_hash
    # vLLM 0.32 tags the salt: block 0's extra keys are (("cache_salt", salt),).
    h0 = sha256_cbor((seed_hash, tuple(range(16)), (("cache_salt", "tenant-a"),)))
    h1 = sha256_cbor((h0, tuple(range(16, 32)), None))
    assert block_hash_chain(tokens, cache_salt="tenant-a", hash_seed="7") == [h0, h1]


def test_releases_before_tagged_salts_hash_the_bare_salt() -> None:
    seed_hash = none_hash("0")
    bare = sha256_cbor((seed_hash, tuple(range(16)), ("tenant-a",)))
    hasher = BlockHasher(block_size=16)
    assert block_extra_keys(0, "tenant-a", "bare") == ("tenant-a",)
    assert block_extra_keys(0, "", "tagged") is None  # vLLM skips an empty salt
    assert (
        hasher.hash_fn((seed_hash, tuple(range(16)), block_extra_keys(0, "tenant-a", "bare")))
        == bare
    )


def test_pickle_algorithm_matches_vllm_default_sha256() -> None:
    seed = hashlib.sha256(pickle.dumps("0", protocol=pickle.HIGHEST_PROTOCOL)).digest()
    expected = hashlib.sha256(
        pickle.dumps((seed, tuple(range(16)), None), protocol=pickle.HIGHEST_PROTOCOL)
    ).digest()
    assert block_hash_chain(list(range(16)), algo="sha256") == [expected]


def test_salts_change_every_block_and_partial_blocks_are_not_hashed() -> None:
    tokens = list(range(50))
    plain = block_hash_chain(tokens)
    salted = block_hash_chain(tokens, cache_salt="a")
    assert len(plain) == len(salted) == 3
    assert all(p != s for p, s in zip(plain, salted, strict=True))
    assert block_hash_chain(tokens, cache_salt="a") == salted
    assert block_hash_chain(tokens, cache_salt="b") != salted
    assert block_hash_chain(tokens, hash_seed="1") != plain


def test_incremental_hasher_agrees_with_the_pure_chain() -> None:
    hasher = BlockHasher(block_size=4)
    hashes: list[bytes] = []
    tokens: list[int] = []
    for token in range(19):
        tokens.append(token)
        hasher.extend(hashes, tokens, "s")
    assert hashes == block_hash_chain(tokens, block_size=4, cache_salt="s")


def test_event_hash_is_the_low_64_bits_big_endian() -> None:
    digest = bytes(range(32))
    assert event_hash(digest) == int.from_bytes(bytes(range(24, 32)), "big")
