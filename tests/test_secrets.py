"""The one list of credentials and the keyed masking digest."""

from __future__ import annotations

import functools
import os
import pathlib
import re
import stat
import time
from collections.abc import Callable

import hypothesis
import orjson
import pytest
from hypothesis import strategies as st

import dejacache
from dejacache import _secret_masks, _secret_shapes, _secrets, keys
from dejacache.cassettes.redact import PLACEHOLDER, Redactor
from dejacache.cassettes.scan import scan_text


@pytest.fixture
def key_home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.delenv("DEJACACHE_SECRET_KEY", raising=False)
    monkeypatch.delenv("DEJACACHE_SECRET_KEY_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "dejacache" / "secret.key"


@pytest.mark.parametrize("name", [
    "password", "Password", "PASSWORD", "passwd", "api_key", "apiKey", "API-KEY", "x-api-key",
    "X-Api-Key", "authorization", "Authorization", "token", "auth_token", "authToken",
    "secret", "bearer", "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY",
    "aws_access_key_id", "openai_api_key", "OPENAI_API_KEY", "anthropicApiKey", "db_password",
    "stripe_secret_key", "client_secret", "refresh_token", "cookie", "Set-Cookie",
])
def test_credential_names_in_every_spelling(name: str) -> None:
    assert _secrets.is_secret_name(name)


@pytest.mark.parametrize("name", [
    "pwd", "PWD", "pass", "Pass", "passphrase", "pswd", "passcode", "db_pwd", "DB_PWD",
    "gpgPassphrase", "smtp_passcode", "user_pswd",
])
def test_short_password_names_are_credentials(name: str) -> None:
    assert _secrets.is_secret_name(name)


@pytest.mark.parametrize("name", [
    "max_tokens", "tokens", "eos_token", "next_page_token", "request_id", "user", "model",
    "key", "code", "signature", "secretary", "passage", "tokenizer", "author",
    "password_policy", "password_hint_shown", "passes", "bypass", "compass", "boarding_pass",
    "first_pass", "passenger", "pwd_dir", "pin", "spin", "pinned",
])
def test_ordinary_names_are_data(name: str) -> None:
    assert not _secrets.is_secret_name(name)


def test_token_is_a_credential_in_requests_only() -> None:
    assert _secrets.is_secret_name("token")
    assert not _secrets.is_secret_name("token", response=True)  # logprobs
    assert _secrets.is_secret_name("access_token", response=True)
    # a shell tool's working directory and a test report's pass count are data in answers
    for name in ("pwd", "pass"):
        assert _secrets.is_secret_name(name)
        assert not _secrets.is_secret_name(name, response=True)
    assert _secrets.is_secret_name("passphrase", response=True)


def test_query_only_names() -> None:
    for name in ("key", "sig", "code", "api_key", "X-Amz-Signature", "password"):
        assert _secrets.is_secret_query(name)
    assert not _secrets.is_secret_query("page")


@pytest.mark.parametrize("name", ["code_verifier", "device_code", "assertion",
                                  "client_assertion", "subject_token", "actor_token"])
def test_oauth_proofs_are_secret_in_queries_and_forms_only(name: str) -> None:
    """PKCE's verifier, a device code, a SAML or JWT assertion, RFC 8693's exchanged tokens:
    credentials where OAuth sends them (a query, a form), data in a JSON body."""
    assert _secrets.is_secret_query(name) and _secrets.is_secret_pair(name)
    assert not _secrets.is_secret_name(name)


def test_key_file_is_created_once_0600_and_reused(key_home: pathlib.Path) -> None:
    a = _secrets.mask("hunter2")
    assert key_home.exists()
    if os.name == "posix":
        assert stat.S_IMODE(key_home.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_home.parent.stat().st_mode) == 0o700
    assert len(bytes.fromhex(key_home.read_text().strip())) == 64
    _secret_masks._cache.clear()  # a new process reads the same file
    assert _secrets.mask("hunter2") == a


def test_env_key_wins_and_changes_every_mask(key_home: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from_file = _secrets.mask("hunter2")
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "shared-with-ci")
    from_env = _secrets.mask("hunter2")
    assert from_env != from_file
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "shared-with-ci")
    assert _secrets.mask("hunter2") == from_env


def test_unreadable_key_file_fails_open_with_a_warning(key_home: pathlib.Path) -> None:
    key_home.parent.mkdir(parents=True)
    key_home.write_text("not hex")
    with pytest.warns(dejacache.DejacacheWarning, match="DEJACACHE_SECRET_KEY"):
        m = _secrets.mask("x")
    assert m.startswith("<secret:")


def test_key_file_is_not_in_the_store_directory(key_home: pathlib.Path) -> None:
    store_dir = pathlib.Path(os.environ["DEJACACHE_DIR"])
    assert store_dir not in _secrets.key_path().parents


def test_masks_are_typed_and_never_look_like_secrets_to_scan() -> None:
    assert _secrets.mask(1234) != _secrets.mask("1234")
    text = orjson.dumps({"aws_secret_access_key": _secrets.mask("A" * 40),
                         "authorization": "Bearer " + _secrets.mask("tok" * 10)}).decode()
    assert list(scan_text(text)) == []


def test_secret_shapes_survive_json_escapes() -> None:
    """``\\nsk-...`` is written ``\\\\nsk-...`` in a JSON file: scan and masking still see it."""
    key = "sk-proj-" + "A1b2C3d4" * 5
    text = orjson.dumps({"m": f"line one\n{key}"}).decode()
    assert [f.kind for f in scan_text(text)] == ["openai key"]
    assert key not in _secrets.scrub_request(text.encode()).decode()


def test_redactor_writes_keyed_masks_as_the_placeholder() -> None:
    """Committed files must not depend on the machine (its masking key) that wrote them."""
    tree = {"note": f"was {_secrets.mask('x')}", "password": _secrets.mask("y")}
    assert Redactor().tree(tree) == {"note": f"was {PLACEHOLDER}", "password": PLACEHOLDER}


def test_scrub_request_masks_shapes_anywhere_and_keeps_the_rest() -> None:
    key = "sk-ant-" + "Z" * 30
    canon = orjson.dumps({"a": [f"use {key}", "AKIAABCDEFGHIJKLMNOP"], "b": 1})
    out = orjson.loads(_secrets.scrub_request(canon))
    assert key not in out["a"][0] and out["a"][0].startswith("use <secret:")
    assert out["a"][1].startswith("<secret:") and out["b"] == 1


def test_substitute_keys_a_credential_argument_portably(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cassette recorded on one machine (one masking key, one API key) replays on another
    when the credential is declared with ``substitute=``."""

    @dejacache.cache(name="ask")
    def ask(q: str, api_key: str) -> str:
        return f"answer {q}"

    path = tmp_path / "c.json"
    with dejacache.cassette(path, substitute={"<API_KEY>": "k1-local"}):
        assert ask("q", api_key="k1-local") == "answer q"
    assert "k1-local" not in path.read_text()
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "the CI machine")
    with dejacache.cassette(path, mode="replay", substitute={"<API_KEY>": "k2-ci"}):
        assert ask("q", api_key="k2-ci") == "answer q"
    # without substitute=, a credential argument is keyed per machine: a miss that says so
    with pytest.raises(dejacache.ReplayMiss, match="differ only in credentials"), \
            dejacache.cassette(path, mode="replay"):
        ask("q", api_key="k1-local")


def test_a_credential_pair_is_keyed_portably_as_a_named_field_is(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``[["api_key", ...]]`` keys with its value masked (it was keyed as it was): alice and
    bob key apart, and a replay on another machine works as it does for a named field, with
    ``substitute=`` (without it, a miss)."""

    @dejacache.cache(name="ask")
    def ask(params: list[list[str]]) -> str:
        return f"answer {params[0][1][:5]}"

    path = tmp_path / "c.json"
    with dejacache.cassette(path, substitute={"<API_KEY>": "k1-local"}):
        assert ask([["api_key", "k1-local"], ["q", "x"]]) == "answer k1-lo"
        assert ask([["api_key", "alice-pw"], ["q", "x"]]) == "answer alice"
        assert ask([["api_key", "bob-pw"], ["q", "x"]]) == "answer bob-p"
    text = path.read_text()
    assert not [v for v in ("k1-local", "alice-pw", "bob-pw") if v in text]
    with dejacache.cassette(path, mode="replay"):
        assert ask([["api_key", "bob-pw"], ["q", "x"]]) == "answer bob-p"
        assert ask([["api_key", "alice-pw"], ["q", "x"]]) == "answer alice"
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "the CI machine")
    with dejacache.cassette(path, mode="replay", substitute={"<API_KEY>": "k2-ci"}):
        assert ask([["api_key", "k2-ci"], ["q", "x"]]) == "answer k1-lo"
    with pytest.raises(dejacache.ReplayMiss), dejacache.cassette(path, mode="replay"):
        ask([["api_key", "alice-pw"], ["q", "x"]])


# --------------------------------------------------------------------- linear patterns

_KB = 1024
_SEPS = ["-", "a", ".", " ", "=", "\\n", "?", "&", "<", ":"]


def _hostile(stem: str) -> Callable[[int], str]:
    """``n`` characters built to make a backtracking regex rescan: for each separator, the
    stem repeated with it, and the stem followed by one long run of it (a part each; a
    quadratic part still grows 256x from 64 KB to 1 MB)."""
    def make(n: int) -> str:
        part = n // (2 * len(_SEPS))
        out = []
        for sep in _SEPS:
            unit = stem + sep
            out += [(unit * (part // len(unit) + 1))[:part], (stem + sep * part)[:part]]
        return "".join(out)

    return make


_STEMS = {
    "anthropic key": ["sk-ant-"], "openai key": ["sk-", "sk-proj-"], "google api key": ["AIza"],
    "aws access key": ["AKIA"], "aws secret key": ["aws_secret_access_key", "AWS_SECRET"],
    "bearer token": ["Bearer", "Bearer \\n"], "jwt": ["eyJ", "eyJaaaaaaaa.", "eyJaaaaaaaa.eyJa"],
    "github token": ["ghp_"], "slack token": ["xoxb-"], "hugging face token": ["hf_"],
    "private key": ["-----BEGIN PRIVATE KEY-----", "-----BEGIN A ", "----", "-----BEGIN"],
    "google oauth token": ["ya29.", "ya29.a.", "ya29.aaaaaaaaaaaaaaaaaaaaaaa."],
    "google refresh token": ["1//0"], "google oauth client secret": ["GOCSPX-"],
    "github fine-grained token": ["github_pat_"], "stripe key": ["sk_live_", "rk_test_"],
    "stripe webhook secret": ["whsec_"], "gitlab token": ["glpat-"], "groq key": ["gsk_"],
    "xai key": ["xai-"], "perplexity key": ["pplx-"], "replicate token": ["r8_"],
    "langsmith key": ["lsv2_pt_", "lsv2_pt_" + "a" * 32 + "_"],
    "tavily key": ["tvly-", "tvly-dev-"], "npm token": ["npm_"], "pypi token": ["pypi-AgE"],
    "sendgrid key": ["SG.", "SG." + "a" * 16 + "."], "twilio key": ["SK"],
    "digitalocean token": ["dop_v1_"], "databricks token": ["dapi", "dapi" + "a" * 32 + "-"],
    "telegram bot token": ["1234567:AA", "1" * 12 + ":", ":AA"],
    "slack webhook": ["services/T", "services/TAAAAAA/B", "services/TAAAAAA/BAAAAAA/"],
    "discord webhook": ["webhooks/", "webhooks/" + "1" * 18 + "/"],
    "url password": ["://", "://a:", "://a:b", "://:@"],
    "url": ["http://x", "https://x?a=", "http://a<secret:", "/", "/a?"],
    "param": ["?", "&a", "?a=b;", "#", "#a"],
    "mask": ["<secret:", "<secret:0"], "trigger": ["sk", "://"], "hump": ["aB", "ABc"],
    "form text": ["a=b&", "password=", "?", "a=&password=x"],
    "multipart text": ['form-data; name="password"\r\n\r\n', "--b\r\n",
                       'form-data; name="password"', "\n--"],
    "form pairs": ["password=", "&password=a", "a=", "?a", "a" * 70 + "=", "=a"],
    "multipart fields": ['form-data; name="password"\n\n', 'form-data; name=\\"pwd\\"'],
    "credential lines": ["password: ", " ", "\n", "a" * 70 + ":", "export ", "password: x \t",
                         "pass\n"],
}


def _compiled(name: str) -> Callable[[str], object]:
    c = _secret_masks._re()
    if name in c.shapes:
        return functools.partial(c.shapes[name].sub, "")
    if name == "url":
        return lambda s: (c.url.sub("", s), c.url_b.sub(b"", s.encode()))
    if name == "param":
        return lambda s: (c.param.sub("", s), c.param_b.sub(b"", s.encode()))
    from dejacache import _formtext

    if name == "form text":
        return lambda s: _formtext.mask_form(s, str.upper, _secrets.is_secret_query)
    if name == "multipart text":
        return lambda s: _formtext.mask_multipart(s, str.upper, _secrets.is_secret_query)
    if name == "form pairs":
        return lambda s: list(_formtext.pair_fields(s, _secrets.is_secret_pair))
    if name == "credential lines":
        return lambda s: _formtext.mask_lines(s, str.upper, _secrets.is_secret_name,
                                                    _secrets.NAME_HINTS)
    if name == "multipart fields":
        return lambda s: list(_formtext.multipart_fields(s, _secrets.is_secret_pair))
    return functools.partial({"mask": c.mask, "trigger": c.trigger,
                              "hump": _secrets._hump()}[name].sub, "")


def _best(fn: Callable[[str], object], text: str, runs: int = 3) -> float:
    # CPU time of this thread, not the wall clock: the suite's other worker and its servers
    # share two cores, and a linear pattern's 1 MB run waited behind them past 40x once.
    times = []
    for _ in range(runs):
        start = time.thread_time()
        fn(text)
        times.append(time.thread_time() - start)
    return min(times)


def _assert_linear(fn: Callable[[str], object], make: Callable[[int], str], what: str) -> None:
    """Time at 64 KB, then at 1 MB against 64 KB: linear work grows 16x, quadratic 256x.
    The 64 KB run is bounded first so a quadratic regex fails in seconds, not hours (the JWT
    shape took 5.5 s at 62 KB); the 1 MB bound allows 40x plus half a second, so load on a
    shared machine cannot fail a linear one."""
    small = _best(fn, make(64 * _KB))
    assert small < 1.0, f"{what}: {small:.2f} s at 64 KB"
    large = _best(fn, make(1024 * _KB), runs=1)
    assert large < 40 * small + 0.5, f"{what}: {small:.4f} s at 64 KB, {large:.2f} s at 1 MB"


@pytest.mark.parametrize("name", list(_STEMS))
def test_every_secret_pattern_is_linear_at_1_mb(name: str) -> None:
    fn = _compiled(name)
    for stem in _STEMS[name]:
        _assert_linear(fn, _hostile(stem), f"{name} on {stem!r}")


def test_every_secret_pattern_passes_the_static_exponential_check() -> None:
    """The check user volatile patterns must pass: none of ours backtracks exponentially."""
    from dejacache import _formtext
    from dejacache._core.redos import exponential

    patterns = [*_secret_shapes.SHAPES.values(), _formtext._NOT_FORM, _formtext._MP_NAME,
                _formtext._NAME_REVERSED, _formtext._PAIR_VALUE, _formtext._VALUE,
                _formtext._BLANK_ANY, _formtext._LINE]
    assert [p for p in patterns if exponential(re.compile(p)) is not None] == []


def test_every_secret_shape_is_timed() -> None:
    """A shape added without hostile stems would skip the 1 MB check above."""
    assert set(_secret_shapes.SHAPES) <= set(_STEMS)


def test_a_long_run_of_jwt_starts_records_in_linear_time() -> None:
    """62 KB of ``-eyJ`` took 5.5 s in every cassette write and SQLite store."""
    def make(n: int) -> str:
        return ("-eyJ" * (n // 4))[:n]

    _assert_linear(lambda s: Redactor().tree({"m": s}), make, "cassette redaction")
    _assert_linear(lambda s: _secrets.scrub_request(orjson.dumps({"m": s})), make, "store")
    _assert_linear(lambda s: list(scan_text(s)), make, "scan")
    _assert_linear(lambda s: _secrets.mask_url_queries(b'"?' + s.encode() + b'"'),
                   lambda n: ("http://x" * (n // 8))[:n], "key URL masking")


# --------------------------------------------------------------------- guarded spans


def test_guarded_keeps_shapes_and_masks_and_masks_url_credentials() -> None:
    key = "sk-proj-" + "Ab1" * 10
    mask = _secrets.mask("m")
    text = f"k={key} u=https://h/x?password=pw&page=2 m={mask} plain"
    regions = _secrets.guarded(text)
    kept = [text[a:b] for a, b, _ in regions]
    assert kept == [key, "pw", mask]
    assert [t for _, _, t in regions] == [key, _secrets.mask("pw"), mask]
    assert _secrets.guarded("nothing to see here") == []


# --------------------------------------------------------------------- leaks


def test_short_password_names_never_reach_a_cassette_store_report_or_miss(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``pwd``, ``pass`` and ``passphrase`` values are credentials in every place a request
    is written: the cassette, the SQLite request column, ``dejacache show``, the HTML report
    and the text of a miss."""
    from dejacache.cli import main
    from dejacache.report import report

    values = {"pwd": "CANARY-PWD-1", "pass": "CANARY-PASS-2", "passphrase": "CANARY-PHRASE-3",
              "db_pwd": "CANARY-DBPWD-4"}

    @dejacache.cache(name="login", kind="llm")
    def login(user: str, pwd: str, opts: dict[str, str]) -> dict[str, str]:
        return {"text": f"welcome {user}"}

    def call(user: str = "ann") -> None:
        login(user, values["pwd"], {k: v for k, v in values.items() if k != "pwd"})

    cassette = tmp_path / "c.json"
    with dejacache.cassette(cassette, mode="record"):
        call()
    with pytest.raises(dejacache.ReplayMiss) as miss, dejacache.cassette(cassette, mode="replay"):
        call("bob")
    store_path = tmp_path / "cache.db"
    store = dejacache.SQLiteStore(store_path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        call()
    store.close()
    with dejacache.scope(store=dejacache.SQLiteStore(store_path), mode="replay",
                         cache_key="t"), pytest.raises(dejacache.ReplayMiss) as store_miss:
        call("bob")
    assert main(["show", str(cassette), "--plain"]) == 0
    shown = capsys.readouterr().out
    db = b"".join(pathlib.Path(str(store_path) + s).read_bytes()
                  for s in ("", "-wal") if pathlib.Path(str(store_path) + s).exists())
    places = {"cassette": cassette.read_text(), "show": shown, "report": report(cassette),
              "miss": str(miss.value), "store miss": str(store_miss.value),
              "sqlite": db.decode("latin-1")}
    for where, text in places.items():
        for value in values.values():
            assert value not in text, f"{value} in the {where}"
    assert "welcome" in places["cassette"] and "login" in places["show"]


def test_vouched_scrubbing_is_bounded_and_bound_to_the_very_object() -> None:
    """A form vouched for is answered without a parse only as that object, only once, and
    only when its check says so; the registry never holds more than a few forms."""
    secret = b'{"m":"key sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"}'
    for i in range(100):
        _secrets.vouch(orjson.dumps({"i": i}), lambda: True)
    assert len(_secrets._VOUCHED) <= _secrets._VOUCHED_MAX
    form = bytes(memoryview(secret))
    _secrets.vouch(form, lambda: False)  # the check says no: the full scrub runs
    assert b"sk-proj-" not in _secrets.scrub_request(form)
    lying = bytes(memoryview(secret))
    _secrets.vouch(lying, lambda: True)
    assert _secrets.scrub_request(secret) != lying  # an equal object is not vouched
    assert _secrets.scrub_request(lying) == lying  # (the check is the caller's promise)
    assert b"sk-proj-" not in _secrets.scrub_request(lying)  # asked once: popped


# --------------------------------------------------------------------- shapes added

_HEX = "0123456789abcdef" * 4
# One credential of each shape, made up (the right length and alphabet, never a real one).
SHAPED = {
    "private key": [
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3V\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1\n-----END EC PRIVATE KEY-----",
        "-----BEGIN DSA PRIVATE KEY-----\nMIIBuwIBAAKBgQD\n-----END DSA PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0w\n"
        "-----END ENCRYPTED PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
        "5E22A2BD85A653FB\n\nhk1ScMG3nWn5Vd5\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0AAAABCAC7\n=Zq8u\n"
        "-----END PGP PRIVATE KEY BLOCK-----",
        "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nP2/56wAAAi4AAAA3\n"
        "---- END SSH2 ENCRYPTED PRIVATE KEY ----",
    ],
    "google oauth token": ["ya29.a0AfB_byC1x2y3z4" + "Q" * 40,
                           "ya29.c.c0ASRK0GaAbCdEfGhIjKlMnOp" + "r" * 30],
    "google refresh token": ["1//0gLkGx3jH5q" + "w" * 50],
    "google oauth client secret": ["GOCSPX-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"],
    "github fine-grained token": ["github_pat_11ABCDEFG0" + "a1b2c3" * 10],
    "stripe key": ["sk_live_4eC39HqLyjWDarjtT1zdp7dc", "rk_test_" + "Zz9" * 8],
    "stripe webhook secret": ["whsec_" + "A1b2" * 8],
    "gitlab token": ["glpat-" + "xYz12_AbC-" * 2],
    "groq key": ["gsk_" + "a1B2" * 13],
    "xai key": ["xai-" + "Q1w2E3r4" * 10],
    "perplexity key": ["pplx-" + "a1b2C3d4" * 6],
    "replicate token": ["r8_" + "A1b2C3d4e5" * 4],
    "langsmith key": ["lsv2_pt_" + _HEX[:32] + "_" + _HEX[:10]],
    "tavily key": ["tvly-" + "A1b2" * 8, "tvly-dev-" + "A1b2" * 8],
    "npm token": ["npm_" + "A1b2C3" * 6],
    "pypi token": ["pypi-AgEIcHlwaS5vcmc" + "CJGQ5ZjI3" * 8],
    "sendgrid key": ["SG." + "a1B2c3D4e5F6g7H8i9J0kL" + "." + "Z9y8X7w6V5" * 4 + "abc"],
    "twilio key": ["SK" + _HEX[:32]],
    "digitalocean token": ["dop_v1_" + _HEX],
    "databricks token": ["dapi" + _HEX[:32], "dapi" + _HEX[:32] + "-2"],
    "telegram bot token": ["bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawX",
                           "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"],
    "slack webhook": ["services/T0A1B2C3D/B0A1B2C3D/" + "xY9" * 8],
    "discord webhook": ["webhooks/112233445566778899/" + "Ab-_9z" * 11],
}


@pytest.mark.parametrize(("kind", "secret"), [(k, v) for k, vs in SHAPED.items() for v in vs])
def test_added_shapes_are_found_and_masked_in_every_place(kind: str, secret: str) -> None:
    """Each shape, under an ordinary name in JSON: ``scan`` finds it, the cassette writes
    ``<REDACTED>`` and the stores a keyed mask, with the text around it kept."""
    text = orjson.dumps({"note": f"use {secret} now"}).decode()
    assert [f.kind for f in scan_text(text)] == [kind]
    tree = {"note": f"use {secret} now"}
    written = Redactor().tree(tree)["note"]
    stored = orjson.loads(_secrets.scrub_request(orjson.dumps(tree)))["note"]
    body = [line for line in secret.split("\n") if line and not line.startswith("-")]
    for out, stand_in in ((written, PLACEHOLDER), (stored, _secrets.MASK_PREFIX)):
        assert stand_in in out and not any(line in out for line in body)
        assert out.startswith("use ") and out.endswith(" now")


def test_a_pem_keeps_its_labels_and_a_file_line_with_its_header_is_found() -> None:
    pem = SHAPED["private key"][1]
    assert Redactor().text(pem) == (
        f"-----BEGIN RSA PRIVATE KEY-----{PLACEHOLDER}-----END RSA PRIVATE KEY-----")
    # a PEM file read line by line: its header line is the finding
    assert [(f.line, f.kind) for f in scan_text("x\n" + pem + "\n")] == [(2, "private key")]


@pytest.mark.parametrize("text", [
    "TASK list: ASK the DESK about RISK", "SKU 1234 and SK-12", "rapid api docs", "dapi",
    "npm_config_cache=/tmp", "pip install xai-sdk", "see ya29.txt", "SG.com", "sk_live_mode",
    "1//0", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
    "keep your PRIVATE KEY private", "glpat-short", "whsec_x", "r8_abc", "the end. ya29.",
    "at 12:30:AAA", "ratio 123456:AAshort", "services/Terms/Billing/overview-of-our-plans",
    "webhooks/12/list", "see /api/webhooks/112233445566778899 for the hook",
])
def test_ordinary_text_is_not_taken_for_an_added_shape(text: str) -> None:
    assert list(_secrets.find_secrets(text)) == []
    assert _secrets.mask_text(text, lambda _: "<X>") == text


def test_shapes_checked_after_their_prefix_match_as_if_checked_before() -> None:
    """Shapes assert their left boundary after the literal prefix (a fast sre search); each
    matches exactly where the same shape with the boundary written first does."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = ["sk-", "sk-ant-", "AIza", "AKIA", "ASIA", "eyJ", "ghp_", "xoxb-", "hf_", "ya29.",
              "1//0", "GOCSPX-", "github_pat_", "sk_live_", "glpat-", "gsk_", "xai-", "SK",
              "SG.", "dapi", "dop_v1_", "r8_", "npm_", "a", "Z", "0", "f", "_", "-", ".", " ",
              "\\n", "\\u0041", "\n", '"', "A1b2C3d4" * 3, "ABCDEFGHIJKLMNOP", _HEX]
    boundary = re.compile(r"\(\?:\(\?<!\[A-Za-z0-9_(?:\\-)?\](\.+)\).*?\.\)\)")
    pairs = []
    for kind, pattern in _secret_shapes.SHAPES.items():
        m = boundary.search(pattern)
        if m is None:
            continue
        left = _secret_shapes._LB64 if "\\-]" in m.group(0) else _secret_shapes._L
        first = left.format(w="") + pattern[:m.start()] + pattern[m.end():]
        pairs.append((kind, re.compile(pattern), re.compile(first)))
    assert len(pairs) >= 25

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(st.sampled_from(pieces), max_size=14).map("".join))
    def same(text: str) -> None:
        for kind, now, first in pairs:
            got = [(m.span(), m.span("s")) for m in now.finditer(text)]
            assert got == [(m.span(), m.span("s")) for m in first.finditer(text)], kind

    same()


def test_masking_skips_only_regexes_that_cannot_match() -> None:
    """``mask_text`` skips a needle when the string lacks its ``_`` or ``-``, and runs each
    kind once: it masks what running every kind whose needle occurs masks."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = [v for vs in SHAPED.values() for v in vs] + [
        "sk-proj-" + "A1b2C3d4" * 5, "ghp_" + "g" * 36, "hf_" + "h" * 30, "xoxb-123456789012",
        "Bearer " + "t" * 20, " ", "_", "-", "\n", "plain words", "TASK"]

    def every_kind(text: str) -> str:
        for _, needles, pat in _secret_masks._re().kinds:
            if any(n in text for n in needles):
                text = pat.sub(lambda m: m.group(0).replace(m.group("s"), "#"), text)
        return text

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(st.sampled_from(pieces), max_size=6).map("".join))
    def same(text: str) -> None:
        assert _secrets.mask_text(text, lambda _: "#", lambda _: False) == every_kind(text)

    same()


# --------------------------------------------------------------------- form and multipart text


def test_form_and_multipart_text_is_masked_where_stores_and_cassettes_keep_it() -> None:
    """Bodies keyed before forms were parsed (``{"text": ...}``) and form-encoded answers:
    credential values never reach a store's request column or a cassette in plain text."""
    form = "grant_type=authorization_code&code=CANARY-code&client_secret=CANARY-cs&x=1"
    multipart = ("--BOUNDARY\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\n"
                 "CANARY-pw\r\n--BOUNDARY--\r\n")
    answer = "access_token=CANARY-at&scope=repo&token_type=bearer"
    request = {"method": "POST", "path": "/token", "body": {"text": form}}
    stored = _secrets.scrub_request(orjson.dumps(request, option=orjson.OPT_SORT_KEYS))
    assert b"CANARY" not in stored and b"grant_type=authorization_code&code=<secret:" in stored
    assert _secrets.scrub_request(orjson.dumps({"body": {"text": multipart}})).count(
        b"<secret:") == 1
    r = Redactor()
    written = orjson.dumps([r.tree(request), r.tree({"text": multipart}),
                            r.tree({"status": 200, "text": answer}, response=True)]).decode()
    assert "CANARY" not in written
    assert "client_secret=<REDACTED>&x=1" in written and "scope=repo" in written
    assert list(scan_text(written)) == []


@hypothesis.given(st.text(alphabet=st.sampled_from("aZbY_-1 éÉ"), max_size=12))
def test_a_name_without_capitals_skips_the_hump_split_and_gets_the_same_forms(name: str) -> None:
    split = re.sub(_secrets._HUMP, "_", name.strip())
    assert _secrets.name_forms(name) == {_secrets.normalize(name), _secrets.normalize(split)}


# --------------------------------------------------------------------- names added


@pytest.mark.parametrize("name", [
    "private_token", "privateToken", "subscription_key", "subscriptionKey", "access_key",
    "accessKey", "client_token", "clientToken", "jwt", "JWT", "X-Subject-Token",
    "x-subject-token",
])
def test_service_credential_names_are_credentials_both_ways(name: str) -> None:
    """GitLab, Azure, S3-style, Vault, JWT logins and OpenStack Keystone name their
    credentials so; answers carry them too (a Vault login's ``auth.client_token``)."""
    assert _secrets.is_secret_name(name)
    assert _secrets.is_secret_name(name, response=True)


def test_auth_is_secret_as_a_query_or_form_field_only() -> None:
    # Firebase's ``?auth=``; a JSON ``auth`` is often an object of settings, kept as data.
    assert _secrets.is_secret_query("auth") and _secrets.is_secret_pair("auth")
    assert not _secrets.is_secret_name("auth")
    settings = {"auth": {"type": "oauth2", "enabled": True}}
    assert Redactor().tree(settings) == settings
    assert Redactor().text("https://x.firebaseio.com/a.json?auth=fb-CANARY-1&print=pretty") == (
        "https://x.firebaseio.com/a.json?auth=<REDACTED>&print=pretty")


def test_service_credentials_never_reach_a_cassette(tmp_path: pathlib.Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx

    answer = orjson.dumps({"auth": {"client_token": "CANARY-R1"}, "access_key": "CANARY-R2",
                           "jwt": "CANARY-R3", "session_id": "s-1"})

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("X-Subject-Token", "CANARY-R4")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    @dejacache.cache(name="connect")
    def connect(host: str, access_key: str, subscription_key: str) -> str:
        return host

    cassette = tmp_path / "c.json"
    try:
        with dejacache.cassette(cassette, mode="record"):
            httpx.get(base + "/data.json?auth=CANARY-Q1")
            httpx.get(base + "/api/v4/projects?private_token=CANARY-Q2")
            httpx.post(base + "/j", json={"access_key": "CANARY-J1",
                                          "subscription_key": "CANARY-J2",
                                          "private_token": "CANARY-J3"})
            httpx.post(base + "/f", data={"auth": "CANARY-F1"})
            connect("h", "CANARY-A1", "CANARY-A2")
    finally:
        server.shutdown()
        server.server_close()
    text = cassette.read_text()
    assert re.findall(r"CANARY-\w+", text) == []
    assert '"s-1"' in text  # a session id in an answer stays data


# --------------------------------------------------------------------- [name, value] pairs


def test_scrub_request_masks_credential_pairs_as_cassettes_redact_them() -> None:
    form = {"headers": [["X-Api-Key", "CANARY-P1"], ["Accept", "text/csv"]],
            "params": [["api_key", "CANARY-P2"]], "opts": [["password", {"n": 7, "on": True}]],
            "tokens": ["token", "hello"]}
    canonical = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    stored = orjson.loads(_secrets.scrub_request(canonical))
    assert stored["headers"] == [["X-Api-Key", _secrets.mask("CANARY-P1")],
                                 ["Accept", "text/csv"]]
    assert stored["params"] == [["api_key", _secrets.mask("CANARY-P2")]]
    assert stored["opts"] == [["password", {"n": _secrets.mask(7), "on": True}]]
    assert stored["tokens"] == ["token", _secrets.mask("hello")]  # a pair by its shape
    assert _secrets.scrub_request(orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)) == (
        orjson.dumps(stored, option=orjson.OPT_SORT_KEYS))  # a mask is not masked again
    written = Redactor().tree(form)
    assert written["headers"] == [["X-Api-Key", PLACEHOLDER], ["Accept", "text/csv"]]


def test_credential_pairs_never_reach_the_sqlite_store(tmp_path: pathlib.Path) -> None:
    @dejacache.cache(name="call_api")
    def call_api(url: str, headers: list[list[str]]) -> dict[str, int]:
        return {"status": 200}

    store_path = tmp_path / "cache.db"
    store = dejacache.SQLiteStore(store_path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        call_api("https://api.example/v1", [["X-Api-Key", "CANARY-S1"]])
    store.close()
    db = b"".join(pathlib.Path(str(store_path) + s).read_bytes()
                  for s in ("", "-wal") if pathlib.Path(str(store_path) + s).exists())
    assert b"call_api" in db and b"CANARY-S1" not in db


# A tool definition as an LLM request carries it: schema lists naming credential fields, and
# credential-named properties whose values are schemas.
_TOOL = {"tools": [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "required": ["api_key", "query"],
    "properties": {"api_key": {"type": "string", "description": "the caller's key"},
                   "mode": {"enum": ["token", "password"]},
                   "password": {"type": ["string", "null"], "examples": ["x", "y"]},
                   "query": {"type": "string"}}}}}]}


def test_schema_lists_and_schemas_are_stored_as_they_were_sent() -> None:
    """A JSON Schema's ``required``/``enum`` list of two naming a credential is names, not
    a ``[name, value]`` pair; stored as one, a miss report showed ``<REDACTED>`` where the
    schema said ``query``. The values a credential's schema gives are hidden in the key,
    the store and the cassette alike: one may be the credential itself."""
    canonical = keys.canonical_json(_TOOL)
    assert _secrets.scrub_request(canonical) == canonical  # stored as keyed
    keyed = orjson.loads(canonical)["tools"][0]["function"]["parameters"]
    assert keyed["required"] == ["api_key", "query"]
    assert keyed["properties"]["mode"] == {"enum": ["token", "password"]}
    assert keyed["properties"]["api_key"] == {"type": "string",
                                              "description": "the caller's key"}
    assert keyed["properties"]["password"] == {
        "type": ["string", "null"], "examples": [_secrets.mask("x"), _secrets.mask("y")]}
    raw = orjson.dumps(_TOOL, option=orjson.OPT_SORT_KEYS)
    assert _secrets.scrub_request(raw) == canonical  # the store's own walk: the same rule
    written = Redactor().tree(_TOOL)
    params = written["tools"][0]["function"]["parameters"]
    assert params["required"] == ["api_key", "query"]
    assert params["properties"]["mode"] == {"enum": ["token", "password"]}
    # A schema under a credential's name describes it: written as it is...
    assert params["properties"]["api_key"] == {"type": "string",
                                               "description": "the caller's key"}
    # ...but for the values it gives the credential, which may be the credential itself.
    assert params["properties"]["password"] == {"type": ["string", "null"],
                                                "examples": [PLACEHOLDER, PLACEHOLDER]}


@pytest.mark.parametrize("value", [
    "hunter2", 1234, ["hunter2"], {"value": "hunter2"}, {"type": "service_account", "key": "k"},
    {"type": "string", "value": "hunter2"}, {"description": "hunter2"}, {"type": "hunter2"},
])
def test_a_credential_that_is_not_a_schema_is_still_hidden(value: object) -> None:
    written = orjson.dumps(Redactor().tree({"api_key": value, "password": value}))
    assert b"hunter2" not in written and b"1234" not in written
    assert b'"key":"k"' not in written


@pytest.mark.parametrize("parent", ["headers", "params", "opts", None])
def test_real_pairs_are_masked_under_any_other_field(parent: str | None) -> None:
    pair = ["Authorization", "Bearer CANARY-H"]
    form: object = [pair] if parent is None else {parent: pair}
    stored = _secrets.scrub_request(orjson.dumps(form, option=orjson.OPT_SORT_KEYS))
    assert b"CANARY-H" not in stored
    assert b"CANARY-H" not in orjson.dumps(Redactor().tree(form))


_NAMES = st.sampled_from(["api_key", "token", "password", "Authorization", "x-api-key",
                          "secret", "query", "q"])


@hypothesis.given(keyword=st.sampled_from(["enum", "required", "examples", "type"]),
                  first=_NAMES, second=_NAMES)
def test_schema_keyword_lists_are_never_pairs(keyword: str, first: str, second: str) -> None:
    request = {"tools": [{"parameters": {"properties": {"f": {keyword: [first, second]}}}}]}
    canonical = keys.canonical_json(request)
    assert canonical == orjson.dumps(request, option=orjson.OPT_SORT_KEYS)  # keyed as sent
    assert _secrets.scrub_request(canonical) == canonical  # stored as keyed
    assert Redactor().tree(request) == request  # written as sent


# --------------------------------------------------------------------- URLs of any kind


@pytest.mark.parametrize(("text", "want"), [
    ("postgresql://app:pw-1@db/x", "postgresql://app:*@db/x"),  # userinfo, any scheme
    ("https://user:p@ss@api.example/x", "https://user:*@api.example/x"),
    ("redis://:pw-1@cache:6379/0", "redis://:*@cache:6379/0"),
    ("wss://rt.example/s?token=t0k", "wss://rt.example/s?token=*"),  # another scheme
    ("/v1/items?api_key=k3y", "/v1/items?api_key=*"),  # a relative URL
    ("Location: /callback?code=c0de&state=1", "Location: /callback?code=*&state=1"),
    ("https://app.example/cb#access_token=t0k&token_type=bearer",  # a fragment
     "https://app.example/cb#access_token=*&token_type=bearer"),
])
def test_credentials_in_urls_of_any_kind_are_masked(text: str, want: str) -> None:
    assert _secrets.mask_text(text, lambda v: "*") == want


@pytest.mark.parametrize("text", [
    "https://example.com:443/path?q=1", "ssh://git@github.com/x.git", "see /docs#section",
    "mailto:ann@example.com", "a/b and c=d", "postgresql://app@db/x",
])
def test_urls_without_credentials_are_left_as_they_are(text: str) -> None:
    assert _secrets.mask_text(text, lambda v: "*") == text


def test_url_passwords_are_guarded_from_volatile_patterns() -> None:
    assert [t for _, _, t in _secrets.guarded("postgresql://app:pw-2024-01-01@db/x")] == [
        "://app:pw-2024-01-01@"]


@pytest.mark.parametrize("text", [
    "/v1/items?api_key={}&page=2", "/cb#access_token={}&token_type=bearer",
    "https://app.example/cb#access_token={}", "postgresql://app:{}@db/x",
    "postgresql://app:{}@db/x?sslmode=require",
])
def test_keys_mask_url_credentials_as_masks_do(text: str) -> None:
    """Keys (canonical JSON bytes) find the URL credentials ``mask_text`` finds, with no
    ``://`` needed elsewhere, and mask each by its keyed digest: two credentials, two forms."""
    alice, bob = (orjson.dumps([text.format(pw)]) for pw in ("alice-pw", "bob-pw"))
    a, b = _secrets.mask_url_queries(alice), _secrets.mask_url_queries(bob)
    assert b"alice-pw" not in a and b"bob-pw" not in b and a != b
    assert a == orjson.dumps([_secrets.mask_text(text.format("alice-pw"), _secrets.mask)])


def test_a_url_password_that_is_another_ones_mask_keys_apart() -> None:
    mask = _secrets.mask("hunter2")
    plain = _secrets.mask_url_queries(b'["postgresql://app:hunter2@db/x"]')
    forged = _secrets.mask_url_queries(f'["postgresql://app:{mask}@db/x"]'.encode())
    assert mask.encode() in plain and plain != forged


def test_relative_url_credentials_are_guarded_from_volatile_patterns() -> None:
    [(_, _, kept)] = _secrets.guarded("/v1/items?api_key=pw-2024-01-01&page=2")
    assert kept == _secrets.mask("pw-2024-01-01")


# --------------------------------------------------------------------- containers under names

# Values a credential's name may hold that are not one string: every leaf is the credential.
_CONTAINERS = [{"key": "hunter2"}, ["hunter2"], ("alice", "hunter2"),
               {"nested": {"x": ["hunter2", 4242]}}, [{"user": "alice", "pw": "hunter2"}],
               {"type": "service_account", "private": "hunter2"}]


def _leaks(text: bytes) -> bool:
    """Whether ``text`` holds a leaf of :data:`_CONTAINERS` in plain. The number counts only
    as a token of its own: keys, checksums and masks are hex digests, and they hold ``4242``
    in ~1 cassette in 1,500 (2 of 3,000 recordings; a CI run failed on a checksum)."""
    return b"hunter2" in text or _NUMBER.search(text) is not None


_NUMBER = re.compile(rb"(?<![0-9A-Za-z])4242(?![0-9A-Za-z])")


def _sqlite_bytes(path: pathlib.Path) -> bytes:
    return b"".join(pathlib.Path(str(path) + s).read_bytes()
                    for s in ("", "-wal") if pathlib.Path(str(path) + s).exists())


@pytest.mark.parametrize("value", _CONTAINERS)
def test_a_container_under_a_credential_name_never_reaches_key_store_cassette_or_miss(
    tmp_path: pathlib.Path, value: object,
) -> None:
    """Every leaf of a dict, list or tuple held under a credential's name is the
    credential: the key holds it masked, and so do the SQLite request column, the cassette
    and the text of a miss (only secret-SHAPED strings were masked there)."""

    @dejacache.cache(name="connect")
    def connect(host: str, credentials: object) -> str:
        return host

    canonical = keys.KeyBuilder(connect.__wrapped__, "connect").canonical(("h", value), {})
    assert not _leaks(canonical)
    cassette = tmp_path / "c.json"
    with dejacache.cassette(cassette, mode="record"):
        connect("h", value)
    with pytest.raises(dejacache.ReplayMiss) as miss, dejacache.cassette(cassette, mode="replay"):
        connect("other", value)
    store_path = tmp_path / "cache.db"
    store = dejacache.SQLiteStore(store_path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        connect("h", value)
    store.close()
    with dejacache.scope(store=dejacache.SQLiteStore(store_path), mode="replay",
                         cache_key="t"), pytest.raises(dejacache.ReplayMiss) as store_miss:
        connect("other", value)
    db = _sqlite_bytes(store_path)
    assert b"connect" in db
    for where, text in {"cassette": cassette.read_bytes(), "sqlite": db,
                        "miss": str(miss.value).encode(),
                        "store miss": str(store_miss.value).encode()}.items():
        assert not _leaks(text), where


def test_scrub_request_hides_every_leaf_under_a_credential_name() -> None:
    form = {"credentials": {"key": "hunter2", "n": 4242, "on": True, "none": None},
            "api_key": ["hunter2"], "q": "hello"}
    stored = orjson.loads(_secrets.scrub_request(orjson.dumps(form)))
    assert stored == {"credentials": {"key": _secrets.mask("hunter2"), "n": _secrets.mask(4242),
                                      "on": True, "none": None},
                      "api_key": [_secrets.mask("hunter2")], "q": "hello"}
    again = orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)
    assert _secrets.scrub_request(again) == again  # a mask is not masked again


def test_a_schema_under_a_credential_name_is_stored_as_sent_but_for_its_values() -> None:
    schema = {"type": "string", "description": "the key", "default": "hunter2"}
    stored = orjson.loads(_secrets.scrub_request(orjson.dumps({"api_key": schema})))
    assert stored == {"api_key": {"type": "string", "description": "the key",
                                  "default": _secrets.mask("hunter2")}}
    assert Redactor().tree({"api_key": schema}) == {"api_key": {
        "type": "string", "description": "the key", "default": PLACEHOLDER}}


@pytest.mark.parametrize("field", ["stop", "stop_sequences"])
def test_stop_lists_are_never_credential_pairs(field: str) -> None:
    """``"stop": ["password", "x"]`` is two stop sequences, not a password ``x``: keyed,
    stored and written as sent (it used to key per machine, so a committed cassette missed)."""
    request = {"model": "m", field: ["password", "x"]}
    canonical = keys.canonical_json(request)
    assert canonical == orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    assert _secrets.scrub_request(canonical) == canonical
    assert Redactor().tree(request) == request


# Random JSON under a random credential name, with one secret somewhere among its leaves.
_SECRET_LEAF = st.from_regex(r"\Azq[a-z]{6,12}\Z")
_NAME = st.sampled_from(["password", "api_key", "credentials", "Authorization", "token",
                         "db_password", "clientSecret", "x-api-key"])
_PLAIN_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                        st.sampled_from(["a", "b", "type", "string"]))


def _holding(secret: str) -> st.SearchStrategy[object]:
    def wrap(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
        return st.one_of(
            st.tuples(inner, st.lists(_PLAIN_LEAF, max_size=3)).map(lambda p: [*p[1], p[0]]),
            st.tuples(inner, st.sampled_from(["key", "user", "v", "type", "default"]),
                      st.dictionaries(st.sampled_from(["a", "b", "c"]), _PLAIN_LEAF,
                                      max_size=2))
            .map(lambda p: {**p[2], p[1]: p[0]}))
    return st.recursive(st.just(secret), wrap, max_leaves=6)


@hypothesis.settings(max_examples=60, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(data=st.data(), name=_NAME)
def test_a_secret_under_a_credential_name_never_shows_at_any_depth(
    tmp_path: pathlib.Path, data: st.DataObject, name: str,
) -> None:
    secret = data.draw(_SECRET_LEAF)
    other = secret + "x"
    value = data.draw(_holding(secret))
    request = {"q": "hi", name: value}
    canonical = keys.canonical_json(request)
    twin = keys.canonical_json({"q": "hi", name: orjson.loads(
        orjson.dumps(value).replace(secret.encode(), other.encode()))})
    assert canonical != twin  # a different secret: a different key
    assert canonical == keys.canonical_json(request)  # the same secret: the same key
    stored = _secrets.scrub_request(canonical)
    written = orjson.dumps(Redactor().tree(request))
    parts = keys.explain("ns", "f", kwargs=request)
    shown = (canonical + stored + written + parts.canonical.encode()
             + orjson.dumps(parts.arguments))
    assert secret.encode() not in shown


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(name=_NAME, kind=st.sampled_from(["string", "integer", "object"]),
                  words=st.dictionaries(st.sampled_from(["description", "title", "format"]),
                                        st.text(max_size=8), max_size=2))
def test_a_schema_under_a_credential_name_round_trips_unchanged(
    name: str, kind: str, words: dict[str, str],
) -> None:
    tool = {"parameters": {"type": "object", "properties": {name: {"type": kind, **words}}}}
    canonical = keys.canonical_json({"tools": [tool]})
    assert orjson.loads(canonical) == {"tools": [tool]}
    assert _secrets.scrub_request(canonical) == canonical
    assert Redactor().tree({"tools": [tool]}) == {"tools": [tool]}


# ------------------------------------------------- basic credentials under ``auth``-like names

# Values an HTTP client takes as basic credentials under an ``auth``-like name, each with the
# password ``hunter2``: requests/httpx tuples, a JSON body's list, aiohttp's ``BasicAuth``
# shape (user, password, encoding) and elasticsearch's ``"user:password"``.
BASIC = [("alice", "hunter2"), ["alice", "hunter2"], ["alice", "hunter2", "latin1"],
         "alice:hunter2"]
# Values under those names that are settings, not credentials: kept byte for byte.
NOT_BASIC = ["bearer", {"type": "oauth2", "flows": {}}, True, None, ["a", "b", "c", "d"],
             ["alice"], [1, "hunter2"], "https://auth.example/token", "see docs: hunter2",
             "alice:", ":hunter2"]


@pytest.mark.parametrize("name", ["auth", "Auth", "basic_auth", "basicAuth", "http-auth",
                                  "HTTP_AUTH", "proxy_auth", "proxyAuth", "proxy_basic_auth"])
def test_auth_like_names_are_not_credential_names(name: str) -> None:
    """``"auth": "bearer"`` in a tool definition is a setting: only basic credentials
    under these names hold a credential (keyed per machine, so no broader)."""
    assert _secrets.is_auth_name(name) and not _secrets.is_secret_name(name)


def test_creds_is_a_credential_name() -> None:
    assert _secrets.is_secret_name("creds") and _secrets.is_secret_name("Creds")


@pytest.mark.parametrize("value", BASIC)
@pytest.mark.parametrize("name", ["auth", "basic_auth", "httpAuth", "proxy_auth"])
def test_basic_credentials_are_stored_and_written_without_the_password(
        name: str, value: object) -> None:
    form = {"url": "u", "opts": {name: value}}
    raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    stored = _secrets.scrub_request(raw)
    written = orjson.dumps(Redactor().tree(form))
    for out in (stored, written):
        assert b"hunter2" not in out and b"alice" in out
    assert _secrets.mask("hunter2").encode() in stored
    assert _secrets.scrub_request(stored) == stored  # a mask is not masked again
    assert PLACEHOLDER.encode() in written


@pytest.mark.parametrize("value", NOT_BASIC)
def test_other_values_under_auth_names_are_stored_and_written_as_sent(value: object) -> None:
    form = {"auth": value, "tools": [{"name": "t", "auth": value}]}
    raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    assert _secrets.scrub_request(raw) == raw
    assert Redactor().tree(form) == form


def aiohttp_basic_auth(login: str, password: str) -> object:
    """aiohttp's ``BasicAuth`` (a named tuple: login, password, encoding), made without
    the deprecation warning aiohttp 3.14 gives."""
    import warnings

    import aiohttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return aiohttp.BasicAuth(login, password)


# Bytes as requests takes them (``auth=(b"alice", b"hunter2")``), mixed pairs too: how the
# stored and written forms spell the password, plain (``hunter2`` as keys' base64 of bytes).
BASIC_BYTES = [(b"alice", b"hunter2"), ("alice", b"hunter2"), (b"alice", "hunter2"),
               [bytearray(b"alice"), b"hunter2", "utf-8"]]
_PLAIN_PASSWORD = (b"hunter2", b"aHVudGVyMg")  # (base64 of b"hunter2", as keys spell bytes)


@pytest.mark.parametrize("value", BASIC_BYTES)
def test_bytes_basic_credentials_are_keyed_stored_and_written_without_the_password(
        value: object) -> None:
    """The key's form holds the password's mask (its type in it: ``b"hunter2"`` and
    ``"hunter2"`` are two credentials); stores and cassettes keep that form, the user
    name as the key spells it."""
    canonical = keys.canonical_json({"url": "u", "auth": value})
    stored = _secrets.scrub_request(canonical)
    written = orjson.dumps(Redactor().tree(orjson.loads(canonical)))
    for out in (canonical, stored, written):
        assert not any(p in out for p in _PLAIN_PASSWORD), out
    assert _secrets.mask(value[1]).encode() in canonical
    assert stored == canonical and PLACEHOLDER.encode() in written
    assert orjson.loads(written)["auth"][0] == orjson.loads(canonical)["auth"][0]  # the user


@pytest.mark.parametrize("value", [
    [{"\x00bytes": "YWxpY2U="}, {"\x00bytes": "aHVudGVyMg=="}],  # both bytes
    ["alice", {"\x00bytes": "aHVudGVyMg=="}],  # mixed
])
def test_bytes_in_keys_spelling_are_stored_and_written_without_the_password(
        value: object) -> None:
    """A canonical form that reaches a store or a cassette with the bytes plain (a form
    written before: stores and cassettes read the key's spelling of bytes)."""
    for form in ({"auth": value}, {"headers": [["proxy-auth", value]]}):
        raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
        stored = _secrets.scrub_request(raw)
        written = orjson.dumps(Redactor().tree(form))
        for out in (stored, written):
            assert not any(p in out for p in _PLAIN_PASSWORD), out
            assert b"YWxpY2U=" in out or b"alice" in out  # the user, as it is
        assert _secrets.scrub_request(stored) == stored


# ``[name, value]`` pairs (headers, query parameters listed as pairs) of basic credentials,
# each with the password ``pw``.
PAIRS = [lambda pw: [["auth", ("alice", pw)]], lambda pw: [["auth", "alice:" + pw]],
         lambda pw: [("basic_auth", ["alice", pw])],
         lambda pw: [["Accept", "v"], ["httpAuth", ["alice", pw, "latin1"]]],
         lambda pw: [["auth", (b"alice", pw.encode())]]]
# Pairs under those names that hold settings: kept byte for byte.
NOT_PAIRS = [[["auth", "bearer"]], [["auth", {"type": "oauth2"}]], [["auth", True]],
             [["auth", ["a", "b", "c", "d"]]], [["auth", "alice"]], ["auth", "bearer", "x"],
             [["auth", "https://auth.example/token"]]]


@pytest.mark.parametrize("pairs", PAIRS)
def test_basic_credentials_in_pairs_are_keyed_stored_and_written_without_the_password(
        pairs: Callable[[str], list[object]]) -> None:
    """The pairs rule and the fields' rule are one (``_secrets.pair_kind``): a pair named
    ``auth`` hides its password as an ``auth`` field does, in the key, the store and the
    cassette; another password keys apart."""
    canonical = keys.canonical_json({"url": "u", "headers": pairs("hunter2")})
    stored = _secrets.scrub_request(canonical)
    written = orjson.dumps(Redactor().tree(orjson.loads(canonical)))
    for out in (canonical, stored, written):
        assert not any(p in out for p in _PLAIN_PASSWORD), out
    assert b"alice" in written or b"YWxpY2U=" in written
    assert stored == canonical and PLACEHOLDER.encode() in written
    assert canonical != keys.canonical_json({"url": "u", "headers": pairs("hunter3")})


@pytest.mark.parametrize("pairs", PAIRS[:4])
def test_basic_credentials_in_pairs_as_sent_are_stored_and_written_without_the_password(
        pairs: Callable[[str], list[object]]) -> None:
    form = {"headers": orjson.loads(orjson.dumps(pairs("hunter2")))}
    raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    for out in (_secrets.scrub_request(raw), orjson.dumps(Redactor().tree(form))):
        assert b"hunter2" not in out and b"alice" in out


@pytest.mark.parametrize("pairs", NOT_PAIRS)
def test_other_pairs_under_auth_names_are_keyed_stored_and_written_as_sent(
        pairs: list[object]) -> None:
    for form in ({"opts": pairs}, {"headers": pairs, "q": "x"}):  # (params: ?auth= is one)
        raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
        assert keys.canonical_json(form) == raw
        assert _secrets.scrub_request(raw) == raw
        assert Redactor().tree(form) == form


@pytest.mark.parametrize("field", ["required", "enum", "stop"])
def test_a_list_of_two_under_a_schema_list_is_no_pair(field: str) -> None:
    """``"required": ["auth", "proxy:port"]`` lists two names, as a credential's name does."""
    form = {"schema": {field: ["auth", "proxy:port"]}}
    raw = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    assert keys.canonical_json(form) == raw and _secrets.scrub_request(raw) == raw
    assert Redactor().tree(form) == form


def test_basic_credentials_never_reach_the_sqlite_store(tmp_path: pathlib.Path) -> None:
    @dejacache.cache(name="fetch")
    def fetch(url: str, auth: object) -> str:
        return url

    store_path = tmp_path / "cache.db"
    store = dejacache.SQLiteStore(store_path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        for value in [*BASIC, {"auth": ["alice", "hunter2"]},
                      aiohttp_basic_auth("alice", "hunter2"), *BASIC_BYTES,
                      *[pairs("hunter2") for pairs in PAIRS]]:
            fetch("https://api.example/v1", value)
    store.close()
    db = b"".join(pathlib.Path(str(store_path) + s).read_bytes()
                  for s in ("", "-wal") if pathlib.Path(str(store_path) + s).exists())
    assert b"fetch" in db and b"alice" in db
    assert not any(p in db for p in _PLAIN_PASSWORD)
