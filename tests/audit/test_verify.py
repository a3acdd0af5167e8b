"""The offline verifier: clean exports verify, every tampering is detected and named."""

from __future__ import annotations

import base64
import io
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.bundle import withheld_entry
from audit.chain import canonical_json, event_hash
from audit.errors import PublicKeyInvalid, PublicKeyMismatch, PublicKeyMissing
from audit.selectors import tenant_chain_name
from audit.services.digests import audit_digest_create
from audit.verify import EXIT_ERROR, EXIT_INTACT, EXIT_TAMPERED, load_keys, run, verify_bundle
from tests.audit.helpers import KEY_2, bundle_path, keyset_file, pem_file, record_events, run_export
from tests.factories import actor_for

FUZZ_MUTATIONS = 200
FUZZ_SEED = 20261130


def _extract(export, into: Path) -> Path:
    into.mkdir(parents=True)
    with zipfile.ZipFile(bundle_path(export)) as archive:
        archive.extractall(into)
    return into


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(lines), encoding="utf-8")


def _full(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if '"withheld":true}' not in line]


def _findings(bundle: Path, keys) -> list[tuple[str, str | None, int | None]]:
    report = verify_bundle(bundle, keys)
    return [(f.kind, f.chain, f.seq) for f in report.findings]


# --- Mutations: each changes the bundle and returns a label, or None if not applicable.


def _mutate_value(value, rng: random.Random):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([-1, 1, 7])
    if isinstance(value, str):
        if value and rng.random() < 0.5:
            i = rng.randrange(len(value))
            return value[:i] + chr((ord(value[i]) + 1) % 0x7F or 65) + value[i + 1 :]
        return value + "x"
    if value is None:
        return ""
    if isinstance(value, dict):
        return {**value, "injected": 1}
    return [value]


def m_edit_field(d: Path, rng: random.Random, ctx: dict) -> str | None:
    path = d / "events.jsonl"
    lines = _lines(path)
    if not lines:
        return None
    i = rng.randrange(len(lines))
    entry = json.loads(lines[i])
    key = rng.choice(sorted(entry))
    entry[key] = _mutate_value(entry[key], rng)
    lines[i] = canonical_json(entry) + "\n"
    _write(path, lines)
    return f"edit {key}"


def m_edit_nested(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    full = _full(lines)
    if not full:
        return None
    i = rng.choice(full)
    entry = json.loads(lines[i])
    entry["details"]["n"] = -1
    lines[i] = canonical_json(entry) + "\n"
    _write(path, lines)
    return "edit nested"


def m_rehash_one(d, rng, ctx):
    """A smarter attacker: edit a record and recompute its hash."""
    path = d / "events.jsonl"
    lines = _lines(path)
    full = _full(lines)
    if not full:
        return None
    i = rng.choice(full)
    entry = json.loads(lines[i])
    entry["target_id"] = "forged"
    entry["hash"] = event_hash(entry)
    lines[i] = canonical_json(entry) + "\n"
    _write(path, lines)
    return "rehash one"


def m_rehash_cascade(d, rng, ctx):
    """Edit a record and re-link every later record of the file (only full records)."""
    path = d / "events.jsonl"
    lines = _lines(path)
    if not lines or len(_full(lines)) != len(lines):
        return None
    entries = [json.loads(line) for line in lines]
    chain = entries[-1]["chain"]
    start = rng.choice([i for i, e in enumerate(entries) if e["chain"] == chain])
    entries[start]["action"] = "forged.action"
    for i in range(start, len(entries)):
        if i > start:
            entries[i]["prev_hash"] = entries[i - 1]["hash"]
        entries[i]["hash"] = event_hash(entries[i])
    _write(path, [canonical_json(e) + "\n" for e in entries])
    return "rehash cascade"


def m_delete(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    if not lines:
        return None
    del lines[rng.randrange(len(lines))]
    _write(path, lines)
    return "delete"


def m_duplicate(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    if not lines:
        return None
    lines.insert(rng.randrange(len(lines) + 1), lines[rng.randrange(len(lines))])
    _write(path, lines)
    return "duplicate"


def m_forge_insert(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    full = _full(lines)
    if not full:
        return None
    entry = json.loads(lines[rng.choice(full)])
    entry["target_id"] = "planted"
    entry["seq"] = entry["seq"] + rng.choice([0, 1, 1000])
    entry["hash"] = event_hash(entry)
    lines.insert(rng.randrange(len(lines) + 1), canonical_json(entry) + "\n")
    _write(path, lines)
    return "forged insert"


def m_reorder(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    if len(lines) < 2:
        return None
    i, j = sorted(rng.sample(range(len(lines)), 2))
    lines[i], lines[j] = lines[j], lines[i]
    _write(path, lines)
    return "swap"


def m_move(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    if len(lines) < 3:
        return None
    line = lines.pop(rng.randrange(len(lines)))
    lines.insert(rng.randrange(len(lines) + 1), line)
    _write(path, lines)
    return "move"


def m_truncate(d, rng, ctx):
    path = d / "events.jsonl"
    data = path.read_bytes()
    if not data:
        return None
    path.write_bytes(data[: rng.randrange(len(data))])
    return "truncate"


def m_splice(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    other = ctx["other_lines"]
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(other))
    _write(path, lines)
    return "splice other tenant"


def m_hide(d, rng, ctx):
    path = d / "events.jsonl"
    lines = _lines(path)
    full = _full(lines)
    if not full:
        return None
    i = rng.choice(full)
    lines[i] = canonical_json(withheld_entry(json.loads(lines[i]))) + "\n"
    _write(path, lines)
    return "hide as withheld"


def m_byte_flip(d, rng, ctx):
    path = d / "events.jsonl"
    data = bytearray(path.read_bytes())
    if not data:
        return None
    i = rng.randrange(len(data))
    data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return "byte flip"


def m_sig_flip(d, rng, ctx):
    path = d / "manifest.json"
    manifest = json.loads(path.read_text())
    raw = bytearray(base64.b64decode(manifest["signature"]["value"]))
    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    manifest["signature"]["value"] = base64.b64encode(bytes(raw)).decode()
    path.write_text(json.dumps(manifest))
    return "signature bit flip"


def _leaves(value, path=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def m_manifest_edit(d, rng, ctx):
    path = d / "manifest.json"
    manifest = json.loads(path.read_text())
    leaves = [p for p in _leaves(manifest) if p[0] != "signature"]
    target = rng.choice(leaves)
    node = manifest
    for part in target[:-1]:
        node = node[part]
    node[target[-1]] = _mutate_value(node[target[-1]], rng)
    path.write_text(json.dumps(manifest))
    return f"manifest {'.'.join(map(str, target))}"


def m_view_edit(d, rng, ctx):
    views = [p for p in (d / "events.csv", d / "events.ocsf.jsonl") if p.exists()]
    if not views or not views[0].read_text():
        return None
    path = views[0]
    lines = _lines(path)
    i = rng.randrange(len(lines))
    line = lines[i]
    j = rng.randrange(max(len(line) - 1, 1))
    lines[i] = line[:j] + ("Z" if line[j] != "Z" else "Y") + line[j + 1 :]
    _write(path, lines)
    return "view edit"


def m_digest_edit(d, rng, ctx):
    path = d / "digests.jsonl"
    lines = _lines(path)
    if not lines:
        return None
    i = rng.randrange(len(lines))
    digest = json.loads(lines[i])
    key = rng.choice(sorted(digest))
    digest[key] = _mutate_value(digest[key], rng)
    lines[i] = canonical_json(digest) + "\n"
    _write(path, lines)
    return f"digest {key}"


def m_add_file(d, rng, ctx):
    (d / "notes.txt").write_text("nothing to see")
    return "extra file"


def m_remove_file(d, rng, ctx):
    candidates = [p for p in d.iterdir() if p.name != "manifest.json"]
    rng.choice(candidates).unlink()
    return "file removed"


MUTATIONS = [
    m_edit_field,
    m_edit_nested,
    m_rehash_one,
    m_rehash_cascade,
    m_delete,
    m_duplicate,
    m_forge_insert,
    m_reorder,
    m_move,
    m_truncate,
    m_splice,
    m_hide,
    m_byte_flip,
    m_sig_flip,
    m_manifest_edit,
    m_view_edit,
    m_digest_edit,
    m_add_file,
    m_remove_file,
]


def _tree(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir()}


def _build_bundles(tenant_a, tenant_b, admin_a, admin_b):
    """A varied set of clean exports (formats, filters, scopes, with and without digests)."""
    record_events(tenant_a, admin_a, 30)
    record_events(tenant_b, admin_b, 12)
    audit_digest_create(chain=tenant_chain_name(tenant_a), hour=_hour())
    record_events(tenant_a, admin_a, 10)
    by = actor_for(admin_a)
    return {
        "tenant-jsonl": run_export(tenant=tenant_a, by=by),
        "tenant-csv-action": run_export(tenant=tenant_a, by=by, fmt="csv", action="tests.*"),
        "tenant-ocsf-denied": run_export(tenant=tenant_a, by=by, fmt="ocsf", outcome="denied"),
        "tenant-csv-actor": run_export(tenant=tenant_a, by=by, fmt="csv", actor="alice"),
        "tenant-jsonl-get": run_export(tenant=tenant_a, by=by, action="tests.thing.get"),
        "platform-jsonl": run_export(tenant=None),
        "platform-ocsf-failed": run_export(tenant=None, fmt="ocsf", outcome="failed"),
        "platform-csv-b": run_export(tenant=None, fmt="csv", filter_tenant=tenant_b),
        "empty": run_export(tenant=tenant_a, by=by, actor="nobody"),
    }


def _hour():
    from django.utils import timezone

    return timezone.now()


@pytest.mark.django_db
def test_clean_exports_verify_and_tampered_ones_are_always_detected(
    tenant_a, tenant_b, admin_a, admin_b, tmp_path
) -> None:
    bundles = _build_bundles(tenant_a, tenant_b, admin_a, admin_b)
    keys = load_keys(str(keyset_file(tmp_path / "keys.json")))
    clean: dict[str, Path] = {}
    for name, export in bundles.items():
        assert export.status == "succeeded", name
        for form in (bundle_path(export), _extract(export, tmp_path / "clean" / name)):
            report = verify_bundle(form, keys)
            assert report.intact, (name, [str(f) for f in report.findings])  # no false alarm
        clean[name] = tmp_path / "clean" / name
    assert any(json.loads((p / "digests.jsonl").read_text() or "null") for p in clean.values())
    ctx = {"other_lines": _lines(clean["platform-csv-b"] / "events.jsonl")}

    rng = random.Random(FUZZ_SEED)
    detected, applied, labels = 0, 0, []
    while applied < FUZZ_MUTATIONS:
        name = rng.choice(sorted(clean))
        mutation = rng.choice(MUTATIONS)
        work = tmp_path / "fuzz" / str(applied)
        shutil.copytree(clean[name], work)
        before = _tree(work)
        label = mutation(work, rng, ctx)
        if label is None or _tree(work) == before:
            shutil.rmtree(work)
            continue  # not applicable to this bundle, or a no-op: draw again
        applied += 1
        labels.append(label)
        try:
            intact = verify_bundle(work, keys).intact
        except (PublicKeyMismatch, PublicKeyMissing):
            intact = False  # the manifest's key reference was altered: refused
        detected += not intact
        assert not intact, (name, label)
        shutil.rmtree(work)
    assert (detected, applied) == (FUZZ_MUTATIONS, FUZZ_MUTATIONS)
    assert len({label.split()[0] for label in labels}) >= 15  # the fuzz hit every family


# --- Naming exactly what happened -----------------------------------------------------------


@pytest.fixture
def tenant_bundle(tenant_a, admin_a, tmp_path):
    record_events(tenant_a, admin_a, 10)
    export = run_export(tenant=tenant_a)
    bundle = _extract(export, tmp_path / "bundle")
    keys = load_keys(str(keyset_file(tmp_path / "keys.json")))
    return bundle, keys, tenant_chain_name(tenant_a)


def _edit(bundle: Path, change) -> None:
    path = bundle / "events.jsonl"
    entries = [json.loads(line) for line in _lines(path)]
    entries = change(entries)
    _write(path, [canonical_json(e) + "\n" for e in entries])


@pytest.mark.django_db
def test_a_modified_record_is_named(tenant_bundle) -> None:
    bundle, keys, chain = tenant_bundle
    _edit(bundle, lambda es: [{**e, "outcome": "success"} if e["seq"] == 4 else e for e in es])
    assert ("modified", chain, 4) in _findings(bundle, keys)
    assert ("file", None, None) in _findings(bundle, keys)


@pytest.mark.django_db
def test_a_modified_and_rehashed_record_is_named_by_the_next_link(tenant_bundle) -> None:
    bundle, keys, chain = tenant_bundle

    def rehash(entries):
        entries[4]["target_id"] = "forged"
        entries[4]["hash"] = event_hash(entries[4])
        return entries

    _edit(bundle, rehash)
    assert [f for f in _findings(bundle, keys) if f[0] != "file"] == [("modified", chain, 5)]


@pytest.mark.django_db
def test_a_rewritten_tail_is_caught_by_the_signed_anchor(tenant_bundle) -> None:
    bundle, keys, chain = tenant_bundle

    def rewrite(entries):
        entries[6]["action"] = "forged.action"
        for i in range(6, len(entries)):
            if i > 6:
                entries[i]["prev_hash"] = entries[i - 1]["hash"]
            entries[i]["hash"] = event_hash(entries[i])
        return entries

    _edit(bundle, rewrite)
    assert ("modified", chain, 10) in _findings(bundle, keys)


@pytest.mark.django_db
def test_deleted_inserted_reordered_and_truncated_records_are_named(tenant_bundle) -> None:
    bundle, keys, chain = tenant_bundle
    pristine = _tree(bundle)

    def reset():
        for name, data in pristine.items():
            (bundle / name).write_bytes(data)

    _edit(bundle, lambda es: [e for e in es if e["seq"] != 3])
    assert ("deleted", chain, 3) in _findings(bundle, keys)
    reset()
    _edit(bundle, lambda es: es[:6] + [es[2]] + es[6:])
    assert ("inserted", chain, 3) in _findings(bundle, keys)
    reset()
    _edit(bundle, lambda es: es[:4] + [es[5], es[4]] + es[6:])
    assert {f for f in _findings(bundle, keys) if f[0] != "file"} in (
        {("reordered", chain, 5)},
        {("reordered", chain, 6)},
    )
    reset()
    _edit(bundle, lambda es: es[:2] + [es[8]] + es[2:8] + es[9:])  # seq 9 moved up
    assert {f for f in _findings(bundle, keys) if f[0] != "file"} == {("reordered", chain, 9)}
    reset()
    _edit(bundle, lambda es: es[:7])
    assert ("truncated", chain, 8) in _findings(bundle, keys)
    reset()
    _edit(bundle, lambda es: [{**e, "withheld": True} if e["seq"] == 2 else e for e in es])
    assert ("modified", chain, 2) in _findings(bundle, keys)
    reset()
    _edit(bundle, lambda es: [withheld_entry(e) if e["seq"] == 2 else e for e in es])
    assert ("modified", chain, 2) in _findings(bundle, keys)
    reset()
    assert verify_bundle(bundle, keys).intact


@pytest.mark.django_db
def test_another_tenants_records_spliced_in_are_named(
    tenant_a, tenant_b, admin_b, tenant_bundle, tmp_path
) -> None:
    bundle, keys, _ = tenant_bundle
    record_events(tenant_b, admin_b, 3)
    other = _extract(run_export(tenant=tenant_b), tmp_path / "other")
    foreign = _lines(other / "events.jsonl")[1]
    lines = _lines(bundle / "events.jsonl")
    _write(bundle / "events.jsonl", lines[:5] + [foreign] + lines[5:])
    assert ("inserted", tenant_chain_name(tenant_b), 2) in _findings(bundle, keys)


@pytest.mark.django_db
def test_an_altered_manifest_or_signature_fails_the_signature(tenant_bundle) -> None:
    bundle, keys, _ = tenant_bundle
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["chains"][0]["last_seq"] = 9
    manifest["count"]["records"] = 9
    manifest["chains"][0]["records"] = 9
    manifest_path.write_text(json.dumps(manifest))
    assert ("signature", None, None) in _findings(bundle, keys)


# --- Keys and the command line ---------------------------------------------------------------


@pytest.mark.django_db
def test_a_missing_unreadable_or_wrong_public_key_is_a_clear_error(tenant_bundle, tmp_path) -> None:
    bundle, _, _ = tenant_bundle
    with pytest.raises(PublicKeyMissing):
        load_keys(None)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    with pytest.raises(PublicKeyInvalid):
        load_keys(str(garbage))
    with pytest.raises(PublicKeyInvalid):
        load_keys(str(tmp_path / "absent.pem"))
    wrong = load_keys(str(pem_file(tmp_path / "wrong.pem", KEY_2)))
    with pytest.raises(PublicKeyMismatch) as raised:
        verify_bundle(bundle, wrong)
    assert raised.value.code == "public_key_mismatch" and "test-key-1" in raised.value.message

    for key_arg, code in (
        (None, "public_key_missing"),
        (str(garbage), "public_key_invalid"),
        (str(tmp_path / "wrong.pem"), "public_key_mismatch"),
    ):
        out, err = io.StringIO(), io.StringIO()
        assert run(str(bundle), key_arg, as_json=False, out=out, err=err) == EXIT_ERROR
        assert f"[{code}]" in err.getvalue()


@pytest.mark.django_db
def test_a_bare_pem_of_the_signing_key_verifies(tenant_bundle, tmp_path) -> None:
    from tests.audit.helpers import KEY_1

    bundle, _, _ = tenant_bundle
    out, err = io.StringIO(), io.StringIO()
    status = run(
        str(bundle), str(pem_file(tmp_path / "k.pem", KEY_1)), as_json=True, out=out, err=err
    )
    assert status == EXIT_INTACT, out.getvalue()
    assert json.loads(out.getvalue())["intact"] is True


@pytest.mark.django_db
def test_the_management_command_and_the_cli_report_tampering_with_exit_1(
    tenant_bundle, tmp_path, capsys
) -> None:
    from controlplane.cli import main

    bundle, _, chain = tenant_bundle
    key_file = str(tmp_path / "keys.json")
    call_command("audit", "verify", str(bundle), "--public-key", key_file)
    assert "INTACT" in capsys.readouterr().out
    assert main(["audit", "verify", str(bundle), "--public-key", key_file]) == EXIT_INTACT
    _edit(bundle, lambda es: [e for e in es if e["seq"] != 6])
    with pytest.raises(CommandError) as raised:
        call_command("audit", "verify", str(bundle), "--public-key", key_file)
    assert raised.value.returncode == EXIT_TAMPERED
    assert main(["audit", "verify", str(bundle), "--public-key", key_file]) == EXIT_TAMPERED
    out = capsys.readouterr().out
    assert f"DELETED    chain {chain} seq 6: missing (deleted)" in out and "TAMPERED" in out


@pytest.mark.django_db
def test_cacheplane_audit_verify_needs_no_database_or_django(tenant_bundle, tmp_path) -> None:
    bundle, _, _ = tenant_bundle
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["DJANGO_SETTINGS_MODULE"] = "no.such.settings"  # any Django setup would fail
    script = (
        "import sys; from controlplane.cli import main; "
        f"status = main(['audit', 'verify', {str(bundle)!r}, '--public-key', "
        f"{str(tmp_path / 'keys.json')!r}]); "
        "assert 'django.db' not in sys.modules, 'django.db was imported'; sys.exit(status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INTACT" in done.stdout


@pytest.mark.django_db
def test_a_duplicated_archive_member_or_an_oversized_line_is_reported(
    tenant_bundle, tenant_a, tmp_path
) -> None:
    import warnings

    bundle, keys, _ = tenant_bundle
    archive = tmp_path / "doubled.zip"
    shutil.copyfile(bundle_path(_latest_export(tenant_a)), archive)
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "a") as doubled:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        doubled.writestr("events.jsonl", b"")
    report = verify_bundle(archive, keys)
    assert any("more than once" in f.message for f in report.findings)

    with (bundle / "events.jsonl").open("ab") as events:
        events.write(b'{"chain":"' + b"x" * (17 << 20) + b'"}\n')
    report = verify_bundle(bundle, keys)
    assert not report.intact
    assert any(f.kind == "modified" and "not valid JSON" in f.message for f in report.findings)


def _latest_export(tenant):
    from audit.models import AuditExport

    return AuditExport.objects.filter(tenant=tenant).latest("created_at")


def _members(data: bytes) -> dict[str, bytes] | None:
    """Every member's bytes, or None when the archive does not read cleanly."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {info.filename: archive.read(info) for info in archive.infolist()}
    except Exception:
        return None


@pytest.mark.django_db
def test_every_flipped_byte_of_a_bundle_is_unreadable_or_tampered_never_a_traceback(
    tenant_a, admin_a, tmp_path
) -> None:
    record_events(tenant_a, admin_a, 2)
    original = bundle_path(run_export(tenant=tenant_a)).read_bytes()
    keys = str(keyset_file(tmp_path / "keys.json"))
    intact_members = _members(original)
    target = tmp_path / "flipped.zip"
    outcomes: dict[int, int] = {}
    for position in range(len(original)):
        flipped = bytearray(original)
        flipped[position] ^= 0xFF
        target.write_bytes(flipped)
        out, err = io.StringIO(), io.StringIO()
        status = run(str(target), keys, as_json=False, out=out, err=err)  # raises = bug
        outcomes[status] = outcomes.get(status, 0) + 1
        if status == EXIT_ERROR:
            assert "[bundle_unreadable]" in err.getvalue(), (position, err.getvalue())
        elif status == EXIT_INTACT:
            # Only a byte no reader looks at (a local header's timestamp, say) may be
            # flipped without notice: every member must still read back identically.
            assert _members(bytes(flipped)) == intact_members, position
        else:
            assert status == EXIT_TAMPERED and "TAMPERED" in out.getvalue(), position
    assert outcomes.get(EXIT_ERROR) and outcomes.get(EXIT_TAMPERED), outcomes
